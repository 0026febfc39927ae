package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/gendef"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kurmad.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// putAttachment journals a into pod id the way podnet does: SetAttachment
// inside one UpdatePod.
func putAttachment(s *Store, id string, a Attachment) error {
	return s.UpdatePod(id, func(p *Pod) error {
		p.SetAttachment(a)
		return nil
	})
}

func TestPodLifecycle(t *testing.T) {
	s, path := openTemp(t)
	created := time.Now().UTC().Truncate(time.Second)
	p := &Pod{ID: "p1", Name: "web", Netns: "/run/kurma/netns/p1", Networks: []string{"a", "b:IP=1.2.3.4"}, Created: created, Phase: PhaseCreating}
	if err := s.PutPod(p); err != nil {
		t.Fatal(err)
	}
	cfg := []byte(`{"cniVersion":"1.0.0", "name":"a",  "type":"bridge"}`)
	if err := putAttachment(s, "p1", Attachment{Network: "a", Interface: "eth0", Config: cfg, Image: "sha512-x", Phase: AttachIntent}); err != nil {
		t.Fatal(err)
	}
	if err := putAttachment(s, "p1", Attachment{Network: "a", Interface: "eth0", Config: cfg, Image: "sha512-x", Phase: AttachDone, Result: []byte(`{"cniVersion":"1.1.0"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := putAttachment(s, "p1", Attachment{Network: "b", Interface: "eth1", Config: []byte(`{}`), Phase: AttachIntent}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPhase("p1", PhaseReady, ""); err != nil {
		t.Fatal(err)
	}
	// Reopen: everything must be on disk.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.GetPod("p1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != PhaseReady || got.Name != "web" || !got.Created.Equal(created) || len(got.Networks) != 2 {
		t.Errorf("pod = %+v", got)
	}
	if len(got.Attachments) != 2 || got.Attachments[0].Phase != AttachDone || got.Attachments[1].Network != "b" {
		t.Fatalf("attachments = %+v", got.Attachments)
	}
	if string(got.Attachments[0].Config) != string(cfg) {
		t.Errorf("config snapshot changed: %s", got.Attachments[0].Config)
	}
	list, err := s2.ListPods()
	if err != nil || len(list) != 1 {
		t.Fatalf("ListPods = %v, %v", list, err)
	}
	if err := s2.DeletePod("p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.GetPod("p1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetPod after delete: %v", err)
	}
	if err := s2.DeletePod("p1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeletePod: %v", err)
	}
	if err := putAttachment(s2, "p1", Attachment{Network: "a"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("attachment on missing pod: %v", err)
	}
}

func TestListOrder(t *testing.T) {
	s, _ := openTemp(t)
	base := time.Now()
	for i, id := range []string{"c", "a", "b"} {
		if err := s.PutPod(&Pod{ID: id, Created: base.Add(time.Duration(i) * time.Second), Phase: PhaseReady}); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := s.ListPods()
	var ids []string
	for _, p := range list {
		ids = append(ids, p.ID)
	}
	if strings.Join(ids, "") != "cab" {
		t.Errorf("order = %v, want creation order c a b", ids)
	}
}

func TestConcurrentWrites(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutPod(&Pod{ID: "p", Phase: PhaseCreating}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := putAttachment(s, "p", Attachment{Network: string(rune('a' + i)), Phase: AttachIntent}); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	p, _ := s.GetPod("p")
	if len(p.Attachments) != 20 {
		t.Errorf("%d attachments, want 20 (lost update)", len(p.Attachments))
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"missing dir", filepath.Join(dir, "nope", "kurmad.db"), "no such file"},
		{"parent is a file", filepath.Join(file, "kurmad.db"), "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%s) = %v, want error mentioning %q", tt.path, err, tt.want)
			}
		})
	}
}

// TestOpenUnwritable makes the state dir a read-only bind mount: root
// ignores permission bits, so that is the only honest way to be refused.
func TestOpenUnwritable(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(dir, "kurmad.db"))
	if err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("Open in read-only dir = %v", err)
	}
}

func TestOpenInUse(t *testing.T) {
	_, path := openTemp(t)
	// bolt's flock is per open file description, so a second Open in the
	// same process contends exactly like a second kurmad would.
	start := time.Now()
	_, err := Open(path, WithLockTimeout(200*time.Millisecond))
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open = %v, want ErrInUse", err)
	}
	if took := time.Since(start); took >= defaultLockTimeout {
		t.Errorf("second Open gave up after %s: WithLockTimeout(200ms) not honoured", took)
	}
	if !strings.Contains(err.Error(), "another kurmad") {
		t.Errorf("error %q does not explain", err)
	}
}

func TestAttachedGenerations(t *testing.T) {
	s, _ := openTemp(t)
	base := time.Now()
	s.PutPod(&Pod{ID: "old", Created: base, Phase: PhaseReady, Attachments: []Attachment{
		{Network: "a", Image: "img1", Config: []byte(`{"v":1}`)}, {Network: "b", Image: "imgb"}}})
	s.PutPod(&Pod{ID: "new", Created: base.Add(time.Second), Phase: PhaseCreating, Attachments: []Attachment{
		{Network: "a", Image: "img2", Config: []byte(`{"v":2}`), Phase: AttachIntent}}})
	got, err := s.AttachedGenerations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Network != "a" || gendef.IDOf(got[0].Image) != "img2" || string(got[0].Config) != `{"v":2}` || got[1].Network != "b" {
		t.Errorf("AttachedGenerations = %+v", got)
	}
}

// TestAttachedGenerationsApart: each generation of a network is listed apart,
// and an attachment whose del already succeeded needs none.
func TestAttachedGenerationsApart(t *testing.T) {
	s, _ := openTemp(t)
	base := time.Now()
	s.PutPod(&Pod{ID: "p1", Created: base, Phase: PhaseReady, Attachments: []Attachment{
		{Network: "a", Generation: 1, Image: "img1"}, {Network: "b", Generation: 1, Deleted: true}}})
	s.PutPod(&Pod{ID: "p2", Created: base.Add(time.Second), Phase: PhaseReady, Attachments: []Attachment{
		{Network: "a", Generation: 2, Image: "img2"}}})
	got, err := s.AttachedGenerations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Generation != 1 || gendef.IDOf(got[0].Image) != "img1" || got[1].Generation != 2 || gendef.IDOf(got[1].Image) != "img2" {
		t.Errorf("Networks = %+v, want a/1 and a/2 and no b (deleted)", got)
	}
}

func TestGenerations(t *testing.T) {
	s, path := openTemp(t)
	g := &Generation{Network: "a", Generation: 3, Hash: "d",
		Definition: gendef.Definition{Image: gendef.Ref("img"), Config: []byte(`{}`), AllowCapabilities: []string{"CAP_BPF"}}}
	if err := s.PutGeneration(g); err != nil {
		t.Fatal(err)
	}
	if err := s.PutGeneration(&Generation{Network: "a", Generation: 4, Hash: "e"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteGeneration("a", 4); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteGeneration("a", 9); err != nil {
		t.Errorf("DeleteGeneration of a missing record = %v", err)
	}
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Generations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], g) {
		t.Errorf("Generations after reopen = %+v, want %+v", got, g)
	}
}

// TestOnCommit: the hook hears every sync, with its duration, and nothing
// for a write that needs none, nor for a Sync with nothing to sync.
func TestOnCommit(t *testing.T) {
	s, _ := openTemp(t)
	var durations []time.Duration
	s.OnCommit(func(d time.Duration, _ int) { durations = append(durations, d) })
	for i := range 3 {
		if err := s.PutPod(&Pod{ID: fmt.Sprintf("p%d", i), Phase: PhaseReady}); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil { // nothing more to sync
			t.Fatal(err)
		}
	}
	if err := s.DeletePod("nosuch"); err == nil {
		t.Fatal("deleting a pod that is not there succeeded")
	}
	if err := s.DeletePod("p2"); err != nil { // not synced
		t.Fatal(err)
	}
	if len(durations) != 3 {
		t.Fatalf("OnCommit called %d times for 3 syncs", len(durations))
	}
	for _, d := range durations {
		if d <= 0 {
			t.Errorf("sync duration %v", d)
		}
	}
	s.OnCommit(nil)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if len(durations) != 3 {
		t.Error("OnCommit(nil) did not stop the calls")
	}
}
