package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// genExec is a fakeExec that knows which generations run (Runner) and
// says a network's generation is ready only while it runs (Readiness).
type genExec struct {
	*fakeExec
	mu      sync.Mutex
	running map[string][]int   // by network, newest first
	asked   []netplugin.Target // Ready's questions
}

func (g *genExec) Running(network string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.running[network])
}

func (g *genExec) setRunning(network string, gens ...int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[network] = gens
}

func (g *genExec) Ready(network string, generation int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, netplugin.Target{Network: network, Generation: generation})
	if !slices.Contains(g.running[network], generation) {
		return fmt.Errorf("generation %d: %w", generation, netplugin.ErrUnavailable)
	}
	return nil
}

func newGenExec() *genExec {
	return &genExec{fakeExec: newFakeExec(), running: map[string][]int{"alpha": {1}, "beta": {1}, "gamma": {1}}}
}

// serveGeneration makes new pods of network attach through generation gen.
func (f *fixture) serveGeneration(network string, gen int) {
	serving := servingOf(f.cfg)
	serving[network] = Serving{Generation: gen, Image: fmt.Sprintf("sha512-%s-%d", network, gen)}
	f.m.SetNetworks(f.cfg, serving)
}

// TestGenerationsOfGCCheckAndReady: creates ask the readiness of the
// generation new pods attach to; a pod's check goes to the generation of
// each attachment's add; gc runs in the serving generation when it runs,
// else in the newest that runs with that generation's journaled config,
// lists the attachments of every generation as valid, and, when none
// runs, runs nothing and waits until one does.
func TestGenerationsOfGCCheckAndReady(t *testing.T) {
	ge := newGenExec()
	f := newFixture(t, ge)
	fe := ge.fakeExec
	ctx := context.Background()
	old := f.mustCreate(t, "alpha")
	if err := f.store.PutGeneration(&state.Generation{Network: "alpha", Generation: 1, Config: []byte(`{"name":"alpha","type":"fake","old":true}`)}); err != nil {
		t.Fatal(err)
	}
	f.serveGeneration("alpha", 2)
	if _, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"}}); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Fatalf("create while the serving generation does not run: %v", err)
	}
	if last := ge.asked[len(ge.asked)-1]; last != (netplugin.Target{Network: "alpha", Generation: 2}) {
		t.Errorf("Ready asked of %v, want alpha generation 2", last)
	}
	ge.setRunning("alpha", 2, 1)
	young := f.mustCreate(t, "alpha")

	if _, err := f.m.Check(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Check(ctx, young.ID); err != nil {
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

	ge.setRunning("alpha", 1)
	if err := f.m.GC(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	c = gcs()[1]
	if conf, _ := gcStdin(t, c); c.Generation != 1 || string(conf["old"]) != "true" {
		t.Errorf("gc with only generation 1 running: generation %d stdin %s, want 1 with its journaled config", c.Generation, c.Stdin)
	}

	ge.setRunning("alpha")
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
	ge.setRunning("alpha", 2)
	f.m.Kick()
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
	ge := newGenExec()
	f := newFixture(t, ge)
	ge.setRunning("beta")
	orphan := filepath.Join(f.netns, uuid.NewString())
	if err := netnsfile.Create(orphan); err != nil {
		t.Fatal(err)
	}
	if n := f.m.Collect(context.Background()); n != 0 {
		t.Errorf("Collect: %d failed, want 0 (beta's gc waits)", n)
	}
	if !netnsfile.IsMounted(orphan) || len(ge.callsFor("gc beta")) != 0 {
		t.Fatal("the orphan went, or beta's gc ran, while beta did not run")
	}
	runRetries(t, f.m)
	ge.setRunning("beta", 1)
	f.m.Kick()
	testutil.WaitFor(t, 10*time.Second, "the orphan to go after beta's gc", func() error {
		if _, err := os.Lstat(orphan); !os.IsNotExist(err) {
			return fmt.Errorf("orphan still there (%v)", err)
		}
		return nil
	})
	if len(ge.callsFor("gc beta")) != 1 || len(f.m.WaitingGCs()) != 0 {
		t.Errorf("gc beta ran %d times; gcs of %v wait", len(ge.callsFor("gc beta")), f.m.WaitingGCs())
	}
}

// TestForceDeleteOwesGC: a pod removed by force while its del fails owes
// its network a gc: the generation its add ran in stays in use until the
// gc ran, and the gc no longer lists the pod as valid.
func TestForceDeleteOwesGC(t *testing.T) {
	ge := newGenExec()
	f := newFixture(t, ge)
	ctx := context.Background()
	p := f.mustCreate(t, "alpha")
	f.serveGeneration("alpha", 2)
	ge.on("del alpha", func(call, context.Context) ([]byte, error) { return nil, errors.New("del broke") })
	left, err := f.m.ForceDelete(ctx, p.ID)
	if err != nil || len(left) != 1 || left[0].Generation != 1 {
		t.Fatalf("ForceDelete = %+v, %v", left, err)
	}
	use, err := f.m.InUse()
	if err != nil || !use[netplugin.Target{Network: "alpha", Generation: 1}] || len(f.m.WaitingGCs()) != 1 {
		t.Fatalf("after the removal: in use %v (%v), gcs of %v wait; want alpha generation 1 kept for its gc", use, err, f.m.WaitingGCs())
	}
	if err := f.m.GC(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	if _, valid := gcStdin(t, ge.callsFor("gc alpha")[0]); len(valid) != 0 {
		t.Errorf("valid attachments %v after the only pod went", valid)
	}
	if use, _ := f.m.InUse(); use[netplugin.Target{Network: "alpha", Generation: 1}] || len(f.m.WaitingGCs()) != 0 {
		t.Errorf("after the gc: in use %v, gcs of %v wait", use, f.m.WaitingGCs())
	}
	if s := strings.Join(ge.seen(), ","); s != "add alpha,del alpha,gc alpha" {
		t.Errorf("calls %s", s)
	}
}
