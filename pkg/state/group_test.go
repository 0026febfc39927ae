package state

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestUpdatePodOneCommit: several changes in one UpdatePod are one commit,
// and an error from fn changes nothing.
func TestUpdatePodOneCommit(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutPod(&Pod{ID: "p", Phase: PhaseCreating, Attachments: []Attachment{{Network: "a", Phase: AttachIntent}}}); err != nil {
		t.Fatal(err)
	}
	c0 := s.commits.Load()
	if err := s.UpdatePod("p", func(p *Pod) error {
		p.SetAttachment(Attachment{Network: "a", Interface: "eth0", Phase: AttachDone, Result: []byte(`{}`)})
		p.SetAttachment(Attachment{Network: "b", Phase: AttachIntent})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := s.commits.Load() - c0; n != 1 {
		t.Errorf("commits = %d, want 1", n)
	}
	boom := errors.New("boom")
	if err := s.UpdatePod("p", func(p *Pod) error { p.Phase = PhaseReady; return boom }); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
	p, err := s.GetPod("p")
	if err != nil {
		t.Fatal(err)
	}
	if p.Phase != PhaseCreating || len(p.Attachments) != 2 || p.Attachments[0].Phase != AttachDone || p.Attachments[1].Network != "b" {
		t.Errorf("pod = %+v", p)
	}
	if err := s.UpdatePod("nope", func(*Pod) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing pod: err = %v, want ErrNotFound", err)
	}
}

// TestGroupCommit: concurrent writers share commits, every write lands,
// and a failing write in a shared group fails alone.
func TestGroupCommit(t *testing.T) {
	s, path := openTemp(t)
	const writers, rounds = 16, 20
	c0 := s.commits.Load()
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("pod-%d", w)
			if err := s.PutPod(&Pod{ID: id, Phase: PhaseCreating}); err != nil {
				errs <- err
				return
			}
			for r := range rounds {
				net := fmt.Sprintf("n%d", r)
				if err := putAttachment(s, id, Attachment{Network: net, Phase: AttachDone}); err != nil {
					errs <- err
				}
				// A write that fails (no such pod) in the middle of others'.
				if err := s.SetPhase(id+"-missing", PhaseReady, ""); !errors.Is(err, ErrNotFound) {
					errs <- fmt.Errorf("missing pod: err = %v, want ErrNotFound", err)
				}
			}
			if err := s.SetPhase(id, PhaseReady, ""); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := s.commits.Load() - c0
	t.Logf("%d writes in %d commits", writers*(rounds+2), n)
	if n >= writers*(rounds+2) {
		t.Errorf("commits = %d: concurrent writes were not grouped", n)
	}
	// Everything is there after a reopen (the freelist is not stored: bolt
	// rebuilds it).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	pods, err := s2.ListPods()
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != writers {
		t.Fatalf("pods = %d, want %d", len(pods), writers)
	}
	for _, p := range pods {
		if p.Phase != PhaseReady || len(p.Attachments) != rounds {
			t.Errorf("pod %s: phase %s, %d attachments", p.ID, p.Phase, len(p.Attachments))
		}
		if err := s2.DeletePod(p.ID); err != nil {
			t.Error(err)
		}
	}
}

// TestGroupCommitPanic: a write that panics fails alone with an error; the
// writers sharing its commit are not stranded.
func TestGroupCommitPanic(t *testing.T) {
	s, _ := openTemp(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 3 {
				errs[i] = s.write(func(*bolt.Tx) error { panic("boom") })
				return
			}
			errs[i] = s.PutPod(&Pod{ID: fmt.Sprint("p", i), Phase: PhaseReady})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if (i == 3) != (err != nil) {
			t.Errorf("write %d: err = %v", i, err)
		}
	}
}
