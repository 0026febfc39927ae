package state

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestUpdatePodOneWrite: several changes in one UpdatePod are one record,
// and an error from fn changes nothing.
func TestUpdatePodOneWrite(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutPod(&Pod{ID: "p", Phase: PhaseCreating, Attachments: []Attachment{{Network: "a", Phase: AttachIntent}}}); err != nil {
		t.Fatal(err)
	}
	w0 := s.appended
	if err := s.UpdatePod("p", func(p *Pod) error {
		p.SetAttachment(Attachment{Network: "a", Interface: "eth0", Phase: AttachDone, Result: []byte(`{}`)})
		p.SetAttachment(Attachment{Network: "b", Phase: AttachIntent})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := s.appended - w0; n != 1 {
		t.Errorf("records written = %d, want 1", n)
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

// TestSyncShared: concurrent writers that each sync share fdatasyncs,
// every write lands, and a failing write fails alone.
func TestSyncShared(t *testing.T) {
	s, path := openTemp(t)
	const writers, rounds = 16, 20
	c0 := s.Syncs()
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
				if err := s.Sync(); err != nil {
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
	n := s.Syncs() - c0
	t.Logf("%d syncs asked, %d made", writers*rounds, n)
	if n >= writers*rounds {
		t.Errorf("syncs = %d: concurrent syncs were not shared", n)
	}
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

// TestUpdatePodPanic: an update that panics fails alone with an error and
// leaves the journal usable.
func TestUpdatePodPanic(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutPod(&Pod{ID: "p", Phase: PhaseReady}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 3 {
				errs[i] = s.UpdatePod("p", func(*Pod) error { panic("boom") })
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
	if p, err := s.GetPod("p"); err != nil || p.Phase != PhaseReady {
		t.Errorf("after the panic: %+v, %v", p, err)
	}
}
