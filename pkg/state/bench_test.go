package state

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/kurma-project/kurma/internal/testutil"
	bolt "go.etcd.io/bbolt"
)

var benchResult = []byte(`{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:0a:00:02","sandbox":"/run/kurma/netns/x"}],"ips":[{"address":"10.10.0.2/16","gateway":"10.10.0.1","interface":0}]}`)

var benchConfig = []byte(`{"cniVersion":"1.1.0","name":"mynet","plugins":[{"type":"bridge","bridge":"mynet0","isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","subnet":"10.10.0.0/16"}}]}`)

func benchPod(id string) *Pod {
	return &Pod{ID: id, Netns: "/run/kurma/netns/" + id, Networks: []string{"mynet"}, Created: time.Now().UTC(), Phase: PhaseCreating,
		Attachments: []Attachment{{Network: "mynet", Interface: "eth0", Config: benchConfig, Image: "sha512-0123456789abcdef", Phase: AttachIntent}}}
}

// logSeq is what pkg/podnet asks of the journal for a one-network pod's
// create and delete: the intent, synced before the add; the result with
// the ready phase; a read; deleting; the delete.
func logSeq(s *Store, id string) error {
	p := benchPod(id)
	if err := s.PutPod(p); err != nil {
		return err
	}
	if err := s.Sync(); err != nil {
		return err
	}
	a := p.Attachments[0]
	a.Phase, a.Result = AttachDone, benchResult
	if err := s.UpdatePod(id, func(p *Pod) error {
		p.SetAttachment(a)
		p.Phase = PhaseReady
		return nil
	}); err != nil {
		return err
	}
	if _, err := s.GetPod(id); err != nil {
		return err
	}
	if err := s.SetPhase(id, PhaseDeleting, ""); err != nil {
		return err
	}
	return s.DeletePod(id)
}

// boltSeq is the same sequence as the journal of the previous release
// wrote it: each write a bbolt commit (two fdatasyncs), read back and
// decoded to be changed (its group commit merged concurrent pods' commits;
// this is the lone writer's cost).
func boltSeq(db *bolt.DB, commits *atomic.Uint64, id string) error {
	put := func(p *Pod) error {
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		commits.Add(1)
		return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(podsBucket).Put([]byte(id), b) })
	}
	get := func() (*Pod, error) {
		p := new(Pod)
		err := db.View(func(tx *bolt.Tx) error { return json.Unmarshal(tx.Bucket(podsBucket).Get([]byte(id)), p) })
		return p, err
	}
	if err := put(benchPod(id)); err != nil {
		return err
	}
	for _, step := range []func(*Pod){
		func(p *Pod) {
			p.Attachments[0].Phase, p.Attachments[0].Result = AttachDone, benchResult
			p.Phase = PhaseReady
		},
		nil, // a read
		func(p *Pod) { p.Phase = PhaseDeleting },
	} {
		p, err := get()
		if err != nil {
			return err
		}
		if step != nil {
			step(p)
			if err := put(p); err != nil {
				return err
			}
		}
	}
	commits.Add(1)
	return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(podsBucket).Delete([]byte(id)) })
}

// BenchmarkCreateDeleteJournal runs the journal writes of a one-network
// pod's create and delete, alone and from 16 goroutines at once (the
// bench's client count), on the previous release's journal (bbolt, a
// commit per write) and on this one, and reports fdatasyncs per
// create+delete.
func BenchmarkCreateDeleteJournal(b *testing.B) {
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("bolt/clients=%d", par), func(b *testing.B) {
			db, err := bolt.Open(filepath.Join(b.TempDir(), "kurmad.db"), 0o600, boltOptions(defaultLockTimeout))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(podsBucket); return err }); err != nil {
				b.Fatal(err)
			}
			var commits atomic.Uint64
			testutil.RunParallel(b, par, func() error { return boltSeq(db, &commits, uuid.NewString()) })
			b.ReportMetric(float64(2*commits.Load())/float64(b.N), "syncs/op")
		})
		b.Run(fmt.Sprintf("log/clients=%d", par), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "kurmad.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			c0 := s.Syncs()
			testutil.RunParallel(b, par, func() error { return logSeq(s, uuid.NewString()) })
			b.ReportMetric(float64(s.Syncs()-c0)/float64(b.N), "syncs/op")
		})
	}
}
