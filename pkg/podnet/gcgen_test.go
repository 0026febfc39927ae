package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// TestGenerationsOfGCCheckAndReady: creates ask the readiness of the
// generation new pods attach to; a pod's check goes to the generation of
// each attachment's add; gc runs in the generation Networks names for it,
// with the config it gives, lists the attachments of every generation as
// valid, and, when none runs, runs nothing and waits until one does.
func TestGenerationsOfGCCheckAndReady(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	nets := f.nets
	nets.setRunning("alpha", 1)
	ctx := context.Background()
	old := f.mustCreate(t, "alpha")
	nets.confs[netplugin.Target{Network: "alpha", Generation: 1}] = []byte(`{"name":"alpha","type":"fake","old":true}`)
	nets.serve("alpha", 2, "sha512-alpha-2")
	if _, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"}}); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Fatalf("create while the serving generation does not run: %v", err)
	}
	if last := nets.asked[len(nets.asked)-1]; last != (netplugin.Target{Network: "alpha", Generation: 2}) {
		t.Errorf("Ready asked of %v, want alpha generation 2", last)
	}
	nets.setRunning("alpha", 2, 1)
	young := f.mustCreate(t, "alpha")

	if _, _, err := f.m.Check(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.Check(ctx, young.ID); err != nil {
		t.Fatal(err)
	}
	var checked []int
	for _, c := range fe.callsFor("check alpha") {
		checked = append(checked, c.Generation)
	}
	if !slices.Equal(checked, []int{1, 2}) {
		t.Errorf("checks went to generations %v, want each pod's add's: [1 2]", checked)
	}

	gcs := func() []call { return fe.callsFor("gc alpha") }
	if err := f.m.GC(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	c := gcs()[0]
	conf, valid := gcStdin(t, c)
	if c.Generation != 2 || string(conf["alpha"]) != "1" || len(valid) != 2 {
		t.Errorf("gc with the serving generation running: generation %d stdin %s, want 2 with the config's entry and both pods", c.Generation, c.Stdin)
	}

	nets.setRunning("alpha", 1)
	if err := f.m.GC(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	c = gcs()[1]
	if conf, _ := gcStdin(t, c); c.Generation != 1 || string(conf["old"]) != "true" {
		t.Errorf("gc with only generation 1 running: generation %d stdin %s, want 1 with its own config", c.Generation, c.Stdin)
	}

	nets.setRunning("alpha")
	err := f.m.GC(ctx, "alpha")
	if !errors.Is(err, ErrGCWaits) || !errors.Is(err, netplugin.ErrUnavailable) || len(gcs()) != 2 {
		t.Fatalf("gc with no generation running: %v, %d calls", err, len(gcs()))
	}
	if err.Error() != `network "alpha": /opt/network/gc: gc waits for the network's plugin container to run: network unavailable` {
		t.Errorf("message %q", err)
	}
	if len(f.m.WaitingGCs()) != 1 {
		t.Fatalf("gcs of %v wait, want alpha's", f.m.WaitingGCs())
	}
	runRetries(t, f.m)
	nets.setRunning("alpha", 2)
	nets.start()
	testutil.WaitFor(t, 10*time.Second, "the waiting gc to run", func() error {
		if w := f.m.WaitingGCs(); len(w) > 0 || len(gcs()) != 3 {
			return fmt.Errorf("gcs of %v wait, %d ran", w, len(gcs()))
		}
		return nil
	})
	if c := gcs()[2]; c.Generation != 2 {
		t.Errorf("the waiting gc ran in generation %d, want 2", c.Generation)
	}
}

// TestCollectSweepWaitsForGC: the orphan netns files a Collect keeps while
// a network's gc waits for its plugin container go once that gc ran.
func TestCollectSweepWaitsForGC(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	f.nets.setRunning("alpha", 1)
	f.nets.setRunning("gamma", 1)
	f.nets.setRunning("beta")
	orphan := filepath.Join(f.netns, uuid.NewString())
	if err := netnsfile.Create(orphan); err != nil {
		t.Fatal(err)
	}
	if n := f.m.Collect(context.Background()); n != 0 {
		t.Errorf("Collect: %d failed, want 0 (beta's gc waits)", n)
	}
	if !netnsfile.IsMounted(orphan) || len(fe.callsFor("gc beta")) != 0 {
		t.Fatal("the orphan went, or beta's gc ran, while beta did not run")
	}
	runRetries(t, f.m)
	f.nets.setRunning("beta", 1)
	f.nets.start()
	testutil.WaitFor(t, 10*time.Second, "the orphan to go after beta's gc", func() error {
		if _, err := os.Lstat(orphan); !os.IsNotExist(err) {
			return fmt.Errorf("orphan still there (%v)", err)
		}
		return nil
	})
	if len(fe.callsFor("gc beta")) != 1 || len(f.m.WaitingGCs()) != 0 {
		t.Errorf("gc beta ran %d times; gcs of %v wait", len(fe.callsFor("gc beta")), f.m.WaitingGCs())
	}
}

// TestForceDeleteOwesGC: a pod removed by force while its del fails owes
// its network a gc: the generation its add ran in stays held until the gc
// ran, and the gc no longer lists the pod as valid.
func TestForceDeleteOwesGC(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	p := f.mustCreate(t, "alpha")
	f.nets.serve("alpha", 2, "sha512-alpha-2")
	f.nets.setRunning("alpha", 2, 1)
	fe.on("del alpha", func(call, context.Context) ([]byte, error) { return nil, errors.New("del broke") })
	left, err := f.m.ForceDelete(ctx, p.ID)
	if err != nil || len(left) != 1 || left[0].Generation != 1 {
		t.Fatalf("ForceDelete = %+v, %v", left, err)
	}
	alpha1 := netplugin.Target{Network: "alpha", Generation: 1}
	if use := f.nets.holders(); fmt.Sprint(use) != fmt.Sprint(map[netplugin.Target][]string{alpha1: {gcHolder}}) || len(f.m.WaitingGCs()) != 1 {
		t.Fatalf("after the removal: held %v, gcs of %v wait; want alpha generation 1 held for its gc alone", use, f.m.WaitingGCs())
	}
	if err := f.m.GC(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	if _, valid := gcStdin(t, fe.callsFor("gc alpha")[0]); len(valid) != 0 {
		t.Errorf("valid attachments %v after the only pod went", valid)
	}
	if use := f.nets.holders(); len(use) != 0 || len(f.m.WaitingGCs()) != 0 {
		t.Errorf("after the gc: held %v, gcs of %v wait", use, f.m.WaitingGCs())
	}
	if s := strings.Join(fe.seen(), ","); s != "add alpha,del alpha,gc alpha" {
		t.Errorf("calls %s", s)
	}
}

// TestBootGCSkippedAfterCleanStop: the networks whose gc was current at a
// clean stop (CurrentGCs: not failed, not waiting) have no gc at the next
// boot's Reconcile when kurmad passes them on (SkipBootGC); the others'
// run. A boot that tears down a pod runs every gc whatever it was told.
func TestBootGCSkippedAfterCleanStop(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	f.nets.setRunning("alpha", 1)
	f.nets.setRunning("beta", 1)
	f.nets.setRunning("gamma", 1)
	fe.on("gc beta", func(call, context.Context) ([]byte, error) { return nil, errors.New("gc broke") })
	if n := f.m.Collect(ctx); n != 1 {
		t.Fatalf("Collect: %d failed, want 1 (beta)", n)
	}
	current := f.m.CurrentGCs()
	if fmt.Sprint(current) != "[alpha gamma]" {
		t.Fatalf("CurrentGCs = %v, want [alpha gamma] (beta's gc failed)", current)
	}

	gcs := func() string {
		return fmt.Sprintf("alpha %d beta %d gamma %d", len(fe.callsFor("gc alpha")), len(fe.callsFor("gc beta")), len(fe.callsFor("gc gamma")))
	}
	m := f.newManager(t, fe, f.cfg) // the next kurmad
	f.nets.setRunning("alpha", 1)
	f.nets.setRunning("beta", 1)
	f.nets.setRunning("gamma", 1)
	m.SkipBootGC(current)
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gcs(); got != "alpha 1 beta 2 gamma 1" {
		t.Errorf("gcs after the boot: %s; want only beta's to run again", got)
	}
	if got := m.CurrentGCs(); fmt.Sprint(got) != "[alpha gamma]" {
		t.Errorf("CurrentGCs after the boot = %v, want [alpha gamma]", got)
	}

	// A pod half made when kurmad stopped: its rollback runs, and so does
	// every gc.
	p := f.mustCreate(t, "alpha")
	if err := f.store.SetPhase(p.ID, state.PhaseCreating, ""); err != nil {
		t.Fatal(err)
	}
	m = f.newManager(t, fe, f.cfg)
	f.nets.setRunning("alpha", 1)
	f.nets.setRunning("beta", 1)
	f.nets.setRunning("gamma", 1)
	m.SkipBootGC([]string{"alpha", "beta", "gamma"})
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gcs(); got != "alpha 2 beta 3 gamma 2" {
		t.Errorf("gcs after a boot that rolled a pod back: %s; want every one to run", got)
	}
	f.assertGone(t, p.ID)
}
