// Package state is kurmad's crash-safe journal of pods and their network
// attachments, and of the generations they run in (normally
// <state_dir>/kurmad.db).
//
// Every write is appended to a log (see log.go) before it returns: the
// kernel holds it, so a kill -9 of kurmad loses nothing. Sync makes every
// write so far durable (one fdatasync, shared by concurrent callers), so
// it survives a power cut too; the caller decides which writes need it
// (pkg/podnet syncs each intent before the plugin's add it guards). The
// log is folded into a bbolt database (the snapshot, whose buckets and
// keys are those of the journals of earlier releases) once it grows, and
// at Open and Close. The records are held in memory, decoded: reads never
// touch the disk.
//
// The lifecycle code (pkg/podnet) writes an intent before it makes
// anything, so a restarted kurmad can find and finish or undo whatever a
// crash left.
package state

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kurma-project/kurma/pkg/gendef"
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

	rev uint64 // see Revision
}

// Revision identifies the write that stored this record in this journal
// since it was opened: a pod read again has the same revision until its
// record is written again. (For caches of what is made from a record; not
// journaled.)
func (p *Pod) Revision() uint64 { return p.rev }

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

// ErrClosed is returned by a write to a journal that is closed (or
// closing).
var ErrClosed = errors.New("journal is closed")

// defaultLockTimeout bounds how long Open waits for the journal's file
// lock when no WithLockTimeout says otherwise.
const defaultLockTimeout = 2 * time.Second

// OpenOption adjusts how Open opens the journal.
type OpenOption func(*openOptions)

type openOptions struct {
	lockTimeout time.Duration
}

// WithLockTimeout makes Open wait up to d for another process's hold on
// the journal to end before it fails with ErrInUse; d <= 0 keeps the
// default (2s).
func WithLockTimeout(d time.Duration) OpenOption {
	return func(o *openOptions) {
		if d > 0 {
			o.lockTimeout = d
		}
	}
}

// defaultCompactAt is the size of the log past which it is folded into
// the snapshot: about 250 create+delete cycles of a one-network pod, so
// the snapshot's two fdatasyncs are spread over them and a boot replays
// little.
const defaultCompactAt = 1 << 20

var (
	podsBucket        = []byte("pods")
	generationsBucket = []byte("generations")
	// logBucket holds compactedKey: the number of the last log file whose
	// records the snapshot holds. Earlier kurmads never read it.
	logBucket    = []byte("log")
	compactedKey = []byte("compacted")
)

// recKey names one record: its kind's bucket and its key.
type recKey struct {
	gen bool // generations, else pods
	key string
}

// Store is an open journal. Its methods are safe for concurrent use.
type Store struct {
	path string
	db   *bolt.DB // the snapshot

	mu     sync.RWMutex // guards what follows
	cond   *sync.Cond   // on mu (write side): a sync or compaction ended
	closed bool
	broken error // a log write failed and could not be undone: writes fail

	// The records, decoded. A stored record is never changed: writers
	// store a new one, readers get copies.
	pods   map[string]*Pod
	gens   map[string]*Generation
	phases map[Phase]int // pods by phase
	revs   uint64        // the last Pod.Revision given

	log        *logFile
	toSync     []*logFile // log files appended to since their last fdatasync
	dirDirty   bool       // a log file was made since the directory was synced
	appended   uint64     // records appended
	synced     uint64     // of those, the ones known durable
	syncing    bool       // a Sync is under way (its caller leads it)
	dirty      map[recKey][]byte
	compacting bool
	// compactAt is the log size that starts a compaction:
	// defaultCompactAt, or what a test of this package sets.
	compactAt int64

	syncs atomic.Uint64 // fdatasyncs and fsyncs made (a snapshot's commit counts two)
	// onCommit hears how long each sync took, and its syncs.
	onCommit atomic.Pointer[func(time.Duration, int)]
}

// OnCommit makes the store call fn each time it makes writes durable,
// with how long that took and how many fdatasyncs or fsyncs it made (a
// Sync's fdatasync of the log, shared by the writes of several pods under
// concurrent creates; a snapshot's bbolt commit, two), for kurmad's
// metrics. fn must be quick; nil stops the calls.
func (s *Store) OnCommit(fn func(d time.Duration, syncs int)) {
	if fn == nil {
		s.onCommit.Store(nil)
		return
	}
	s.onCommit.Store(&fn)
}

// Syncs is how many fdatasyncs and fsyncs the journal made since it was
// opened (a bbolt commit counts two: its data pages, then its meta page).
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

func (s *Store) observe(start time.Time, syncs uint64) {
	s.syncs.Add(syncs)
	if f := s.onCommit.Load(); f != nil {
		(*f)(time.Since(start), int(syncs))
	}
}

// Open opens (creating if needed) the journal at path: the snapshot, and
// the log files beside it (path-log.N), whose records it replays and folds
// into the snapshot before it returns. The directory must exist and be
// writable. When another process (a second kurmad) holds the journal,
// Open fails with ErrInUse after 2s (see WithLockTimeout).
func Open(path string, opts ...OpenOption) (*Store, error) {
	o := openOptions{lockTimeout: defaultLockTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("journal %s: state directory: %w", path, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("journal %s: %s is not a directory", path, dir)
	}
	db, err := bolt.Open(path, 0o600, boltOptions(o.lockTimeout))
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("journal %s: %w (is another kurmad running with the same state_dir?)", path, ErrInUse)
		}
		return nil, fmt.Errorf("journal %s: cannot open (is %s writable?): %w", path, dir, err)
	}
	s := &Store{path: path, db: db, compactAt: defaultCompactAt, pods: map[string]*Pod{}, gens: map[string]*Generation{}, phases: map[Phase]int{},
		dirty: map[recKey][]byte{}}
	s.cond = sync.NewCond(&s.mu)
	if err := s.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	return s, nil
}

// load reads the snapshot, replays the logs it does not hold yet, folds
// them into it and starts the next log.
func (s *Store) load() error {
	var compacted uint64
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{podsBucket, generationsBucket, logBucket} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if v := tx.Bucket(logBucket).Get(compactedKey); len(v) == 8 {
			compacted = binary.BigEndian.Uint64(v)
		}
		if err := tx.Bucket(podsBucket).ForEach(func(k, v []byte) error {
			return s.apply(kindPutPod, string(k), v)
		}); err != nil {
			return err
		}
		return tx.Bucket(generationsBucket).ForEach(func(k, v []byte) error {
			return s.apply(kindPutGeneration, string(k), v)
		})
	}); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	clear(s.dirty) // the snapshot holds those
	ns, err := logFiles(s.path)
	if err != nil {
		return err
	}
	last := compacted
	replay := true
	for _, n := range ns {
		last = max(last, n)
		if n <= compacted || !replay {
			continue
		}
		err := readLog(s.path, n, func(r logRecord) error { return s.apply(r.kind, r.key, r.value) })
		if errors.Is(err, errTorn) {
			// What a power cut left of writes no Sync covered: ignored,
			// with every record after it.
			replay = false
			continue
		}
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	if len(ns) > 0 {
		if err := s.snapshot(s.dirty, last); err != nil {
			return err
		}
		clear(s.dirty)
		removeLogs(s.path, last)
	}
	if s.log, err = createLog(s.path, last+1); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	s.dirDirty = true
	return nil
}

// apply sets one record, read from the snapshot or a log, in memory (and
// in dirty, for the next snapshot).
func (s *Store) apply(kind byte, key string, value []byte) error {
	switch kind {
	case kindPutPod:
		p := new(Pod)
		if err := json.Unmarshal(value, p); err != nil {
			return fmt.Errorf("pod %s: decode: %w", key, err)
		}
		s.setPod(key, p, value)
	case kindDeletePod:
		s.setPod(key, nil, nil)
	case kindPutGeneration:
		g := new(Generation)
		if err := json.Unmarshal(value, g); err != nil {
			return fmt.Errorf("generation %s: decode: %w", key, err)
		}
		s.setGeneration(key, g, value)
	case kindDeleteGeneration:
		s.setGeneration(key, nil, nil)
	}
	return nil
}

// setPod stores (nil: removes) pod id's record, encoded as b; s.mu is
// held for writing.
func (s *Store) setPod(id string, p *Pod, b []byte) {
	if old := s.pods[id]; old != nil {
		s.phases[old.Phase]--
	}
	if p == nil {
		delete(s.pods, id)
	} else {
		s.revs++
		p.rev = s.revs
		s.pods[id] = p
		s.phases[p.Phase]++
	}
	s.dirty[recKey{key: id}] = b
}

func (s *Store) setGeneration(key string, g *Generation, b []byte) {
	if g == nil {
		delete(s.gens, key)
	} else {
		s.gens[key] = g
	}
	s.dirty[recKey{gen: true, key: key}] = b
}

// boltOptions keep every commit of the snapshot durable (bolt fdatasyncs
// the data pages, then the meta page, before Update returns; NoSync is
// never set) while writing less per commit: the freelist is not written
// (NoFreelistSync; bolt rebuilds it by scanning at Open, which for a
// journal of pods is a few pages) and kept as a map. Open waits up to
// lockTimeout for the file lock.
func boltOptions(lockTimeout time.Duration) *bolt.Options {
	return &bolt.Options{
		Timeout:        lockTimeout,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	}
}

// snapshot writes dirty's records into the snapshot, noting that it holds
// every record of the logs up to number upTo, in one durable commit.
func (s *Store) snapshot(dirty map[recKey][]byte, upTo uint64) error {
	start := time.Now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		pods, gens := tx.Bucket(podsBucket), tx.Bucket(generationsBucket)
		for k, v := range dirty {
			b := pods
			if k.gen {
				b = gens
			}
			var err error
			if v == nil {
				err = b.Delete([]byte(k.key))
			} else {
				err = b.Put([]byte(k.key), v)
			}
			if err != nil {
				return err
			}
		}
		return tx.Bucket(logBucket).Put(compactedKey, binary.BigEndian.AppendUint64(nil, upTo))
	})
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	s.observe(start, 2)
	return nil
}

// removeLogs removes the log files numbered up to upTo, which the
// snapshot holds. One left behind (a crash) is skipped at the next Open.
func removeLogs(journal string, upTo uint64) {
	ns, _ := logFiles(journal)
	for _, n := range ns {
		if n <= upTo {
			_ = os.Remove(logPath(journal, n))
		}
	}
}

// compact folds the log into the snapshot: the writes go on in a new log
// file while the records of the old one are committed to bbolt; then the
// old one is removed.
func (s *Store) compact() {
	s.mu.Lock()
	old := s.log
	next, err := createLog(s.path, old.n+1)
	if err != nil {
		// Tried again at the next write.
		s.compacting = false
		s.cond.Broadcast()
		s.mu.Unlock()
		return
	}
	s.log, s.dirDirty = next, true
	dirty := s.dirty
	s.dirty = map[recKey][]byte{}
	s.mu.Unlock()

	err = s.snapshot(dirty, old.n)

	s.mu.Lock()
	for s.syncing { // a Sync may be syncing old
		s.cond.Wait()
	}
	if err == nil {
		old.unsynced = false // the snapshot holds its records
	} else {
		// The old log stays (and is replayed at the next Open); its
		// records go into the next snapshot, under the newer writes.
		for k, v := range dirty {
			if _, ok := s.dirty[k]; !ok {
				s.dirty[k] = v
			}
		}
		if old.unsynced {
			if serr := old.f.Sync(); serr == nil {
				s.syncs.Add(1)
				old.unsynced = false
			}
		}
	}
	if !old.unsynced {
		s.toSync = slices.DeleteFunc(s.toSync, func(f *logFile) bool { return f == old })
		old.f.Close()
	}
	s.mu.Unlock()
	if err == nil {
		removeLogs(s.path, old.n)
	}
	s.mu.Lock()
	s.compacting = false
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Close folds the log into the snapshot and releases the journal; writes
// made after it began fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	for s.compacting || s.syncing {
		s.cond.Wait()
	}
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	dirty, cur, files := s.dirty, s.log, s.toSync
	s.mu.Unlock()
	err := s.snapshot(dirty, cur.n)
	if err == nil {
		removeLogs(s.path, cur.n)
	} else {
		for _, f := range files { // the next Open replays them
			_ = f.f.Sync()
		}
	}
	for _, f := range files {
		if f != cur {
			f.f.Close()
		}
	}
	cur.f.Close()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendLocked appends one record to the log; s.mu is held for writing.
// On an error the log is as it was (a record cut short would hide every
// later one from the reader).
func (s *Store) appendLocked(kind byte, key string, value []byte) error {
	if s.closed {
		return ErrClosed
	}
	if s.broken != nil {
		return s.broken
	}
	rec := encodeRecord(kind, key, value)
	if _, err := s.log.f.Write(rec); err != nil {
		if terr := s.log.f.Truncate(s.log.size); terr != nil {
			s.broken = fmt.Errorf("log %s cannot be written (%v) nor cut back to its last record (%v)", s.log.f.Name(), err, terr)
		}
		return fmt.Errorf("log: %w", err)
	}
	s.log.size += int64(len(rec))
	s.appended++
	if !s.log.unsynced {
		s.log.unsynced = true
		s.toSync = append(s.toSync, s.log)
	}
	if s.log.size >= s.compactAt && !s.compacting {
		s.compacting = true
		go s.compact()
	}
	return nil
}

// Sync makes every write that returned before it durable: they survive a
// power cut. Concurrent calls share one fdatasync; a call that finds its
// writes synced returns at once.
func (s *Store) Sync() error {
	s.mu.Lock()
	target := s.appended
	for {
		if s.synced >= target {
			s.mu.Unlock()
			return nil
		}
		if !s.syncing {
			break
		}
		s.cond.Wait()
	}
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.syncing = true
	files, dir, upTo := s.toSync, s.dirDirty, s.appended
	s.toSync, s.dirDirty = nil, false
	for _, f := range files {
		f.unsynced = false
	}
	s.mu.Unlock()

	start := time.Now()
	var err error
	n := uint64(0)
	for _, f := range files {
		if err = f.f.Sync(); err != nil {
			err = fmt.Errorf("journal: sync %s: %w", f.f.Name(), err)
			break
		}
		n++
	}
	if err == nil && dir {
		if err = syncDir(filepath.Dir(s.path)); err != nil {
			err = fmt.Errorf("journal: sync %s: %w", filepath.Dir(s.path), err)
		}
		n++
	}
	s.observe(start, n)

	s.mu.Lock()
	s.syncing = false
	if err == nil {
		s.synced = max(s.synced, upTo)
	} else {
		for _, f := range files {
			if !f.unsynced {
				f.unsynced = true
				s.toSync = append(s.toSync, f)
			}
		}
		s.dirDirty = s.dirDirty || dir
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	return err
}

// Unsynced is how many writes returned since the last Sync that covered
// them: 0 when everything written is durable.
func (s *Store) Unsynced() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.appended - s.synced
}

// clone is a copy of p that its user may change (the byte slices of its
// attachments are shared: they are replaced, never written into).
func (p *Pod) clone() *Pod {
	c := *p
	c.Networks = slices.Clone(p.Networks)
	c.Attachments = slices.Clone(p.Attachments)
	if p.Runtime != nil {
		r := *p.Runtime
		c.Runtime = &r
	}
	return &c
}

// PutPod writes (creates or replaces) the whole record of p.
func (s *Store) PutPod(p *Pod) error {
	if p == nil || p.ID == "" {
		return errors.New("journal: pod without id")
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("journal: encode pod %s: %w", p.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.appendLocked(kindPutPod, p.ID, b); err != nil {
		return fmt.Errorf("journal: write pod %s: %w", p.ID, err)
	}
	s.setPod(p.ID, p.clone(), b)
	return nil
}

// SetPhase sets a pod's phase and error message in one write.
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

// UpdatePod gives fn a copy of pod podID's record to change and writes it
// back, as one record: several changes (an attachment's result and the
// next one's intent, or the last result and the ready phase) cost one
// write. ErrNotFound (wrapped) when the journal does not hold the pod; an
// error from fn (or a panic, turned into an error) leaves the record as
// it was. fn runs with the journal locked: it must be quick and must not
// call the journal.
func (s *Store) UpdatePod(podID string, fn func(*Pod) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := func() error {
		cur := s.pods[podID]
		if cur == nil {
			return ErrNotFound
		}
		p := cur.clone()
		if err := safeCall(fn, p); err != nil {
			return err
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		if err := s.appendLocked(kindPutPod, podID, b); err != nil {
			return err
		}
		s.setPod(podID, p.clone(), b) // fn may have kept p
		return nil
	}()
	if err != nil {
		return fmt.Errorf("journal: update pod %s: %w", podID, err)
	}
	return nil
}

// safeCall runs fn, turning a panic into an error: fn runs with the
// journal locked, and a panic must not leave it so.
func safeCall(fn func(*Pod) error, p *Pod) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("journal: update panicked: %v", r)
		}
	}()
	return fn(p)
}

// GetPod returns a copy of one pod's record; ErrNotFound when absent.
func (s *Store) GetPod(id string) (*Pod, error) {
	s.mu.RLock()
	p := s.pods[id]
	s.mu.RUnlock()
	if p == nil {
		return nil, fmt.Errorf("journal: pod %s: %w", id, ErrNotFound)
	}
	return p.clone(), nil
}

// ListPods returns a copy of every pod's record, oldest first.
func (s *Store) ListPods() ([]*Pod, error) {
	return s.FindPods(nil), nil
}

// FindPods returns a copy of the record of every pod match selects (nil:
// every pod), oldest first. match is given the stored record: it must
// not change it nor keep it, nor call the journal.
func (s *Store) FindPods(match func(*Pod) bool) []*Pod {
	s.mu.RLock()
	var found []*Pod
	for _, p := range s.pods {
		if match == nil || match(p) {
			found = append(found, p)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(found, func(a, b *Pod) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	out := make([]*Pod, len(found))
	for i, p := range found {
		out[i] = p.clone()
	}
	return out
}

// CountPods is how many pods the journal holds in each phase, read in
// constant time.
func (s *Store) CountPods() map[Phase]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[Phase]int, len(s.phases))
	for ph, n := range s.phases {
		if n > 0 {
			out[ph] = n
		}
	}
	return out
}

// DeletePod removes a pod's record; ErrNotFound when absent.
func (s *Store) DeletePod(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := ErrNotFound
	if s.pods[id] != nil {
		if err = s.appendLocked(kindDeletePod, id, nil); err == nil {
			s.setPod(id, nil, nil)
		}
	}
	if err != nil {
		return fmt.Errorf("journal: delete pod %s: %w", id, err)
	}
	return nil
}

// AttachedGenerations lists the generations the journal's pods are
// attached through (attachments intent or done, whose del has not
// succeeded), in first-seen order, each with the image and config snapshot
// of its newest attachment (its hash and the allowances are not known
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
			g := &Generation{Network: a.Network, Generation: a.Generation, Definition: gendef.Definition{Image: gendef.Ref(a.Image), Config: a.Config}}
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
