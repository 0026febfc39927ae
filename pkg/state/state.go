// Package state is kurmad's crash-safe journal of pods and their network
// attachments, kept in a bbolt database (normally <state_dir>/kurmad.db).
//
// Every write is committed (bolt fdatasyncs it) before it returns: when a
// Put returns, the record survives a kill -9 or a power cut. Concurrent
// writes share commits (see Store.write), and UpdatePod lets a caller make
// several changes to a pod in one. The
// lifecycle code (pkg/podnet) writes an intent before it makes anything, so
// a restarted kurmad can find and finish or undo whatever a crash left.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Phase is where a pod is in its lifecycle.
type Phase string

const (
	// PhaseCreating: the intent is journaled; the netns and attachments may
	// partly exist. At boot such a pod is rolled back.
	PhaseCreating Phase = "creating"
	// PhaseReady: every attachment is done.
	PhaseReady Phase = "ready"
	// PhaseDeleting: teardown started; at boot it is finished.
	PhaseDeleting Phase = "deleting"
	// PhaseFailed: a teardown did not complete; Error says why and a later
	// delete retries.
	PhaseFailed Phase = "failed"
)

// AttachPhase is where one network attachment is.
type AttachPhase string

const (
	// AttachIntent: journaled before the plugin's add ran; the plugin may
	// or may not have made something.
	AttachIntent AttachPhase = "intent"
	// AttachDone: add succeeded and Result holds its normalized output.
	AttachDone AttachPhase = "done"
)

// Pod is the journal record of one pod. The JSON keys of the records are
// what earlier kurmads wrote and read: a field may be renamed, its key
// never (TestPreviousRecords holds a record of the previous release).
type Pod struct {
	ID          string       `json:"id"`
	Name        string       `json:"name,omitempty"`
	Netns       string       `json:"netns"`
	Networks    []string     `json:"networks"` // network references as requested ("name" or "name:K=V;...")
	Created     time.Time    `json:"created"`
	Phase       Phase        `json:"phase"`
	Error       string       `json:"error,omitempty"`
	Attachments []Attachment `json:"attachments,omitempty"` // in attach order
	// Runtime is set for a pod made for a container runtime's CNI call:
	// its netns is the runtime's, which Netns only bind-mounts.
	Runtime *Runtime `json:"runtime,omitempty"`
}

// Runtime is a container runtime's side of a pod: who asked, its identity
// for the attachment (container ID, interface, CNI network), and the
// runtime's own netns path, which kurmad bind-mounted at the pod's Netns.
// Teardown removes that bind mount only, never the runtime's namespace.
type Runtime struct {
	Owner       string `json:"owner"`
	ContainerID string `json:"container_id"`
	// Interface is journaled as "ifname", the name earlier kurmads wrote
	// (record keys never change: TestPreviousRecords).
	Interface string `json:"ifname"`
	Network   string `json:"network,omitempty"`
	Netns     string `json:"netns"`
	// NetnsDev and NetnsIno identify the namespace Netns named at ADD
	// (netnsfile.ID): while the pod lives, Netns naming nothing or another
	// namespace means the runtime dropped the container without a DEL
	// that reached kurmad. Zero in records of a kurmad that did not keep
	// them.
	NetnsDev uint64 `json:"netns_dev,omitempty"`
	NetnsIno uint64 `json:"netns_ino,omitempty"`
	// BootID is the host's boot ID at ADD (/proc/sys/kernel/random/boot_id):
	// the journal outlives a reboot, the namespace does not, and after one
	// the kernel hands its device and inode to new namespaces. Empty in
	// records of a kurmad that did not keep it.
	BootID string `json:"boot_id,omitempty"`
	// Dropped says why kurmad found the container dropped by its runtime
	// and releases its attachments (set when the release starts, with
	// DroppedAt); empty otherwise.
	Dropped   string    `json:"dropped,omitempty"`
	DroppedAt time.Time `json:"dropped_at,omitzero"`
}

// Attachment is the journal record of one network attached to a pod.
type Attachment struct {
	Network   string `json:"network"`
	Interface string `json:"interface"`
	// Config is the exact stdin given to add, kept so del runs with it even
	// after the network was edited or removed from kurmad's config.
	Config []byte          `json:"config"`
	Image  string          `json:"image,omitempty"`
	Phase  AttachPhase     `json:"phase"`
	Result json.RawMessage `json:"result,omitempty"`
	// RawResult is add's stdout as the plugin wrote it, whitespace and key
	// order included, up to the cap its writer applies; RawResultTruncated says
	// that more was cut.
	RawResult          string `json:"raw_result,omitempty"`
	RawResultTruncated bool   `json:"raw_result_truncated,omitempty"`
	// Generation is the generation of the network's plugin container that
	// served the add (and so serves the del); 0 for attachments journaled
	// by a kurmad that had no generations.
	Generation int `json:"generation,omitempty"`
	// Deleted says that this attachment's del succeeded in a teardown that
	// did not finish: a retry does not run it again.
	Deleted bool `json:"deleted,omitempty"`
}

// ErrNotFound is returned for a pod the journal does not hold.
var ErrNotFound = errors.New("pod not found in journal")

// ErrInUse is returned by Open when another process holds the journal.
var ErrInUse = errors.New("journal is in use by another process")

// OpenTimeout bounds how long Open waits for bolt's file lock.
var OpenTimeout = 2 * time.Second

var (
	podsBucket        = []byte("pods")
	generationsBucket = []byte("generations")
)

// Store is an open journal. Its methods are safe for concurrent use.
type Store struct {
	db *bolt.DB

	mu         sync.Mutex
	queue      []*commitCall // writes waiting for the next group commit
	committing bool          // a writer is committing; the queue waits for it
	noGroup    bool          // commit each write alone (benchmarks compare)

	commits atomic.Uint64 // bolt write transactions committed (each fsyncs)
	// onCommit hears how long each committed write transaction took.
	onCommit atomic.Pointer[func(time.Duration)]
}

// OnCommit makes the store call fn with the duration of every write
// transaction it commits (each one fsyncs; under concurrent writes one
// commit serves several), for kurmad's metrics. fn must be quick; nil
// stops the calls.
func (s *Store) OnCommit(fn func(time.Duration)) {
	if fn == nil {
		s.onCommit.Store(nil)
		return
	}
	s.onCommit.Store(&fn)
}

// update runs fn in one bolt write transaction and reports its duration
// to OnCommit's function when it committed.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	start := time.Now()
	err := s.db.Update(fn)
	if err == nil {
		s.commits.Add(1)
		if f := s.onCommit.Load(); f != nil {
			(*f)(time.Since(start))
		}
	}
	return err
}

// Open opens (creating if needed) the journal at path. The directory must
// exist and be writable. When another process (a second kurmad) holds the
// journal, Open fails with ErrInUse after OpenTimeout.
func Open(path string) (*Store, error) {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("journal %s: state directory: %w", path, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("journal %s: %s is not a directory", path, dir)
	}
	db, err := bolt.Open(path, 0o600, boltOptions())
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("journal %s: %w (is another kurmad running with the same state_dir?)", path, ErrInUse)
		}
		return nil, fmt.Errorf("journal %s: cannot open (is %s writable?): %w", path, dir, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{podsBucket, generationsBucket} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: init: %w", path, err)
	}
	return &Store{db: db}, nil
}

// boltOptions keep every commit durable (bolt fdatasyncs the data pages,
// then the meta page, before Update returns; NoSync is never set) while
// writing less per commit: the freelist is not written (NoFreelistSync; bolt
// rebuilds it by scanning at Open, which for a journal of pods is a few
// pages) and kept as a map, so a commit writes the pod's leaf, the branch
// pages above it and the meta page, nothing else.
func boltOptions() *bolt.Options {
	return &bolt.Options{
		Timeout:        OpenTimeout,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	}
}

// Close releases the journal.
func (s *Store) Close() error { return s.db.Close() }

// PutPod writes (creates or replaces) the whole record of p.
func (s *Store) PutPod(p *Pod) error {
	if p == nil || p.ID == "" {
		return errors.New("journal: pod without id")
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("journal: encode pod %s: %w", p.ID, err)
	}
	if err := s.write(func(tx *bolt.Tx) error {
		return tx.Bucket(podsBucket).Put([]byte(p.ID), b)
	}); err != nil {
		return fmt.Errorf("journal: write pod %s: %w", p.ID, err)
	}
	return nil
}

// SetPhase sets a pod's phase and error message in one transaction.
func (s *Store) SetPhase(podID string, phase Phase, errMsg string) error {
	return s.UpdatePod(podID, func(p *Pod) error {
		p.Phase, p.Error = phase, errMsg
		return nil
	})
}

// SetAttachment replaces p's attachment of a's network, or appends a.
func (p *Pod) SetAttachment(a Attachment) {
	for i := range p.Attachments {
		if p.Attachments[i].Network == a.Network {
			p.Attachments[i] = a
			return
		}
	}
	p.Attachments = append(p.Attachments, a)
}

// UpdatePod reads pod podID's record, lets fn change it and writes it back,
// all in one transaction: several changes (an attachment's result and the
// next one's intent, or the last result and the ready phase) cost one
// commit. ErrNotFound (wrapped) when the journal does not hold the pod; an
// error from fn leaves the record as it was. fn may be called more than
// once (when a commit shared with other pods' writes is retried) and must
// change nothing but the pod it is given.
func (s *Store) UpdatePod(podID string, fn func(*Pod) error) error {
	err := s.write(func(tx *bolt.Tx) error {
		bk := tx.Bucket(podsBucket)
		v := bk.Get([]byte(podID))
		if v == nil {
			return ErrNotFound
		}
		var p Pod
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if err := fn(&p); err != nil {
			return err
		}
		b, err := json.Marshal(&p)
		if err != nil {
			return err
		}
		return bk.Put([]byte(podID), b)
	})
	if err != nil {
		return fmt.Errorf("journal: update pod %s: %w", podID, err)
	}
	return nil
}

// write runs fn in a write transaction and returns once it is committed
// (fsynced). Writers that arrive while a commit is in flight are queued
// and the next of them commits the whole queue in one transaction (group
// commit): under concurrent creates many pods' records share one pair of
// fdatasyncs, and a lone writer waits for nothing but its own commit.
// A function that fails is taken out of the group and run alone, so one
// pod's error never fails or changes another's write.
func (s *Store) write(fn func(*bolt.Tx) error) error {
	if s.noGroup {
		return s.update(fn)
	}
	c := &commitCall{fn: fn, done: make(chan error, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, c)
	lead := !s.committing
	s.committing = true
	s.mu.Unlock()
	if !lead {
		if err := <-c.done; err != errLead {
			return err
		}
	}
	s.mu.Lock()
	group := s.queue // c is in it
	s.queue = nil
	s.mu.Unlock()
	s.commit(group)
	s.mu.Lock()
	if len(s.queue) > 0 {
		s.queue[0].done <- errLead // it has received nothing yet
	} else {
		s.committing = false
	}
	s.mu.Unlock()
	return <-c.done
}

// commitCall is one queued write; done gets errLead (commit the queue)
// and/or the write's result.
type commitCall struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// safeCall runs fn, turning a panic into an error: a write that panics in
// a group commit must fail alone, not kill the writer leading the group
// and strand the others.
func safeCall(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("journal: write panicked: %v", r)
		}
	}()
	return fn(tx)
}

// errLead tells a queued writer to commit the queue itself.
var errLead = errors.New("journal: lead the next group commit")

// commit runs the group's functions in one transaction and hands each its
// result; a failing function is run alone and the rest retried without it.
func (s *Store) commit(group []*commitCall) {
	for len(group) > 0 {
		failed := -1
		err := s.update(func(tx *bolt.Tx) error {
			for i, c := range group {
				if err := safeCall(c.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 && len(group) > 1 {
			c := group[failed]
			group = append(group[:failed:failed], group[failed+1:]...)
			c.done <- s.update(func(tx *bolt.Tx) error { return safeCall(c.fn, tx) })
			continue
		}
		for _, c := range group {
			c.done <- err
		}
		return
	}
}

// GetPod reads one pod; ErrNotFound when absent.
func (s *Store) GetPod(id string) (*Pod, error) {
	var p *Pod
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(podsBucket).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		p = new(Pod)
		return json.Unmarshal(v, p)
	})
	if err != nil {
		return nil, fmt.Errorf("journal: pod %s: %w", id, err)
	}
	return p, nil
}

// ListPods returns every pod, oldest first.
func (s *Store) ListPods() ([]*Pod, error) {
	var out []*Pod
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(podsBucket).ForEach(func(k, v []byte) error {
			p := new(Pod)
			if err := json.Unmarshal(v, p); err != nil {
				return fmt.Errorf("pod %s: decode: %w", k, err)
			}
			out = append(out, p)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal: list pods: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// DeletePod removes a pod's record; ErrNotFound when absent.
func (s *Store) DeletePod(id string) error {
	err := s.write(func(tx *bolt.Tx) error {
		bk := tx.Bucket(podsBucket)
		if bk.Get([]byte(id)) == nil {
			return ErrNotFound
		}
		return bk.Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("journal: delete pod %s: %w", id, err)
	}
	return nil
}

// AttachedGenerations lists the generations the journal's pods are
// attached through (attachments intent or done, whose del has not
// succeeded), in first-seen order, each with the image and config snapshot
// of its newest attachment (Definition and the allowances are not known
// there). kurmad uses it to keep a generation runnable for del while
// attachments need it.
func (s *Store) AttachedGenerations() ([]*Generation, error) {
	pods, err := s.ListPods()
	if err != nil {
		return nil, err
	}
	type key struct {
		network string
		gen     int
	}
	idx := map[key]int{}
	var out []*Generation
	for _, p := range pods {
		for _, a := range p.Attachments {
			if a.Deleted {
				continue
			}
			g := &Generation{Network: a.Network, Generation: a.Generation, Image: a.Image, Config: a.Config}
			k := key{a.Network, a.Generation}
			if i, ok := idx[k]; ok {
				out[i] = g // pods are oldest first: keep the newest snapshot
				continue
			}
			idx[k] = len(out)
			out = append(out, g)
		}
	}
	return out, nil
}
