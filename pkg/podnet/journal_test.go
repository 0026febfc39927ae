package podnet

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/state"
)

// journalString is a pod record in short: "creating alpha:done beta:intent".
func journalString(p *state.Pod) string {
	parts := []string{string(p.Phase)}
	for _, a := range p.Attachments {
		parts = append(parts, a.Network+":"+string(a.Phase))
	}
	return strings.Join(parts, " ")
}

// TestCreateJournalsBeforeEachStep: each add runs with its own intent (and
// every earlier result) already journaled and synced (a power cut keeps
// it), and nothing more: the pod's intent carries the first attachment's,
// each result carries the next intent, the last result carries ready. A
// delete syncs nothing.
func TestCreateJournalsBeforeEachStep(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	var mu sync.Mutex
	var seen []string
	for _, n := range []string{"alpha", "beta"} {
		fe.on("add "+n, func(c call, _ context.Context) ([]byte, error) {
			p, err := f.store.GetPod(c.Args[1])
			if err != nil {
				return nil, err
			}
			if !netnsfile.IsMounted(c.Args[0]) {
				return nil, fmt.Errorf("add %s: no netns", n)
			}
			synced := "synced"
			if u := f.store.Unsynced(); u != 0 {
				synced = fmt.Sprintf("%d writes unsynced", u)
			}
			mu.Lock()
			seen = append(seen, "add "+n+": "+journalString(p)+" ("+synced+")")
			mu.Unlock()
			return okResult(c, ""), nil
		})
	}
	pod, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := f.store.GetPod(pod.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := append(seen, "created: "+journalString(rec))
	want := []string{
		"add alpha: creating alpha:intent (synced)",
		"add beta: creating alpha:done beta:intent (synced)",
		"created: ready alpha:done beta:done",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("journal at each step:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i, a := range rec.Attachments {
		if a.Interface == "" || len(a.Result) == 0 || a.Config == nil || a.Image != "sha512-"+a.Network {
			t.Errorf("attachment %d = %+v", i, a)
		}
	}
	syncs := f.store.Syncs()
	if err := f.m.Delete(context.Background(), pod.ID); err != nil {
		t.Fatal(err)
	}
	f.assertGone(t, pod.ID)
	if n := f.store.Syncs() - syncs; n != 0 {
		t.Errorf("a delete made %d syncs, want none", n)
	}
}

// TestReconcileIntentWithoutNetns: a crash right after the pod's intent
// (first attachment's intent included) leaves a creating pod whose netns
// was never made. Reconcile dels the attachment anyway (the wrapper's del
// tolerates a missing netns, and IPAM may hold nothing) and forgets the pod.
func TestReconcileIntentWithoutNetns(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	p := &state.Pod{ID: "55555555-5555-4555-8555-555555555555", Created: time.Now(), Phase: state.PhaseCreating,
		Networks: []string{"alpha"}, Attachments: []state.Attachment{{Network: "alpha", Interface: "eth0",
			Config: []byte(`{"name":"alpha"}`), Phase: state.AttachIntent}}}
	p.Netns = filepath.Join(f.netns, p.ID)
	if err := f.store.PutPod(p); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := fe.callsFor("del alpha")
	if len(c) != 1 || c[0].Args[0] != p.Netns || c[0].Stdin != `{"name":"alpha"}` {
		t.Errorf("del alpha = %+v, want one call with the snapshot", c)
	}
	f.assertGone(t, p.ID)
}
