package state

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/kurma-project/kurma/internal/testutil"
	bolt "go.etcd.io/bbolt"
)

// journalSeq is one sequence of Store calls pkg/podnet makes for a pod with
// one network: create, then delete.
type journalSeq func(s *Store, id string) error

// legacySeq is what podnet did before transactions were merged: pod
// intent, attachment intent, attachment done, ready; deleting, delete.
func legacySeq(s *Store, id string) error {
	p := benchPod(id)
	a := p.Attachments[0]
	p.Attachments = nil
	if err := s.PutPod(p); err != nil {
		return err
	}
	if err := putAttachment(s, id, a); err != nil {
		return err
	}
	a.Phase, a.Result = AttachDone, benchResult
	if err := putAttachment(s, id, a); err != nil {
		return err
	}
	if err := s.SetPhase(id, PhaseReady, ""); err != nil {
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

var benchResult = []byte(`{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:0a:00:02","sandbox":"/run/kurma/netns/x"}],"ips":[{"address":"10.10.0.2/16","gateway":"10.10.0.1","interface":0}]}`)

var benchConfig = []byte(`{"cniVersion":"1.1.0","name":"mynet","plugins":[{"type":"bridge","bridge":"mynet0","isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","subnet":"10.10.0.0/16"}}]}`)

func benchPod(id string) *Pod {
	return &Pod{ID: id, Netns: "/run/kurma/netns/" + id, Networks: []string{"mynet"}, Created: time.Now().UTC(), Phase: PhaseCreating,
		Attachments: []Attachment{{Network: "mynet", Interface: "eth0", Config: benchConfig, Image: "sha512-0123456789abcdef", Phase: AttachIntent}}}
}

// BenchmarkCreateDeleteJournal runs the journal writes of a one-network
// pod's create and delete, alone and from 16 goroutines at once (the
// bench's client count), and reports commits (each is an fdatasync of the
// data pages and one of the meta page) per create+delete.
func BenchmarkCreateDeleteJournal(b *testing.B) {
	stores := []struct {
		name string
		open func(path string) (*Store, error)
	}{
		// bolt's default options, every write its own commit: the journal
		// before it was tuned.
		{"plain", func(path string) (*Store, error) { return openWith(path, &bolt.Options{}, true) }},
		// Only the options, or only the group commit.
		{"opts", func(path string) (*Store, error) { return openWith(path, boltOptions(), true) }},
		{"group", func(path string) (*Store, error) { return openWith(path, &bolt.Options{}, false) }},
		{"tuned", Open},
	}
	for _, st := range stores {
		for _, sq := range benchSeqs {
			for _, par := range []int{1, 16} {
				b.Run(fmt.Sprintf("%s/%s/clients=%d", st.name, sq.name, par), func(b *testing.B) {
					s, err := st.open(filepath.Join(b.TempDir(), "kurmad.db"))
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					c0 := s.commits.Load()
					testutil.RunParallel(b, par, func() error { return sq.fn(s, uuid.NewString()) })
					b.ReportMetric(float64(s.commits.Load()-c0)/float64(b.N), "commits/op")
				})
			}
		}
	}
}

func openWith(path string, o *bolt.Options, noGroup bool) (*Store, error) {
	db, err := bolt.Open(path, 0o600, o)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, noGroup: noGroup}
	return s, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(podsBucket)
		return err
	})
}
