package podnet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// runRetries runs m's retry loop until the test ends.
func runRetries(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.RunRetries(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// gone is a testutil.WaitFor condition: pod id has no journal record.
func (f *fixture) gone(id string) func() error {
	return func() error {
		if p, err := f.store.GetPod(id); err == nil {
			return fmt.Errorf("pod %s still journaled: %s %q", id, p.Phase, p.Error)
		}
		return nil
	}
}

// TestTeardownRetriedInBackground: a del that fails keeps the pod and its
// netns; it is tried again with backoff until it succeeds, and only then
// do the netns and the record go. Only the del that failed runs again.
func TestTeardownRetriedInBackground(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	f.m.retries = newRetrier(20*time.Millisecond, 100*time.Millisecond)
	runRetries(t, f.m)
	p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	fails := 3
	fe.on("del beta", func(call, context.Context) ([]byte, error) {
		if fails > 0 {
			fails--
			return nil, errors.New("ipam store locked")
		}
		return nil, nil
	})
	err = f.m.Delete(context.Background(), p.ID)
	var ne *netplugin.NetworkError
	if !errors.As(err, &ne) || ne.Network != "beta" || ne.Op != netplugin.DelPath ||
		!strings.Contains(err.Error(), "ipam store locked") || !strings.Contains(err.Error(), "kurmad retries it") {
		t.Fatalf("Delete = %v, want beta's del failure as a NetworkError", err)
	}
	if !netnsfile.IsMounted(p.Netns) {
		t.Fatal("netns removed while beta's del had not succeeded")
	}
	testutil.WaitFor(t, 10*time.Second, "the retries to finish the delete", f.gone(p.ID))
	f.assertGone(t, p.ID)
	if got, want := strings.Join(fe.seen(), ","), "add alpha,add beta,del beta,del alpha,del beta,del beta,del beta"; got != want {
		t.Errorf("calls = %s, want %s: alpha's del once, beta's until it succeeds", got, want)
	}
}

// TestStartedRunsWaitingDels: a del whose plugin container is not running
// is not run; a container that starts (Networks.Started) runs it at once,
// long before its backoff expires.
func TestStartedRunsWaitingDels(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	f.m.retries = newRetrier(time.Hour, time.Hour)
	runRetries(t, f.m)
	p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	down := true
	fe.on("del alpha", func(call, context.Context) ([]byte, error) {
		if down {
			return nil, &netplugin.NetworkError{Network: "alpha", Err: fmt.Errorf("%w: fetching its image", netplugin.ErrUnavailable)}
		}
		return nil, nil
	})
	if err := f.m.Delete(context.Background(), p.ID); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Fatalf("Delete = %v, want it waiting for alpha", err)
	}
	if kept, _ := f.m.Get(p.ID); kept == nil || kept.Phase != state.PhaseDeleting || !netnsfile.IsMounted(p.Netns) {
		t.Fatalf("kept = %+v, want deleting with its netns", kept)
	}
	fe.mu.Lock()
	down = false
	fe.mu.Unlock()
	f.nets.start()
	testutil.WaitFor(t, 5*time.Second, "the retry to finish the delete once a container started", f.gone(p.ID))
	f.assertGone(t, p.ID)
}

// TestForceDelete: a pod whose del fails is removed by force: netns,
// dir and record go, and what was left is named.
func TestForceDelete(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	p, err := f.m.Create(context.Background(), CreateRequest{Name: "web", Networks: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	fe.on("del beta", func(call, context.Context) ([]byte, error) { return nil, errors.New("plugin exploded") })
	if err := f.m.Delete(context.Background(), p.ID); err == nil {
		t.Fatal("Delete succeeded")
	}
	fe.calls = nil
	left, err := f.m.ForceDelete(context.Background(), p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Network != "beta" || left[0].Interface != "eth1" || left[0].Generation != 1 ||
		!strings.Contains(left[0].Err.Error(), "plugin exploded") {
		t.Errorf("left = %+v, want beta's del", left)
	}
	if got := strings.Join(fe.seen(), ","); got != "del beta" {
		t.Errorf("calls = %s, want beta's del tried once more", got)
	}
	f.assertGone(t, p.ID)
	if f.m.Pending() != 0 {
		t.Error("a pod removed by force still waits for a retry")
	}
	if _, err := f.m.Create(context.Background(), CreateRequest{Name: "web", Networks: []string{"alpha"}}); err != nil {
		t.Errorf("the name of a pod removed by force is still taken: %v", err)
	}
	if _, err := f.m.ForceDelete(context.Background(), p.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("ForceDelete of a removed pod = %v, want ErrNotFound", err)
	}
}

// TestTryAgainLater: an add answering CNI error 11 is run again with
// backoff and the pod is made; one that keeps answering it fails after the
// plugin timeout with ErrTryAgainLater, naming the network, rolled back.
func TestTryAgainLater(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	f.nets.setConfig(parseConfig(t, `{"plugin_timeout": "1s", "pod_networks": [
		{"name": "alpha", "image": "file:///x.aci", "type": "fake"},
		{"name": "beta", "image": "file:///x.aci", "type": "fake"}]}`))
	busy := func(call, context.Context) ([]byte, error) {
		return nil, &netplugin.NetworkError{Network: "beta", Op: netplugin.AddPath,
			Err: &netplugin.ExecError{ExitCode: 1, CNIError: &types.Error{Code: types.ErrTryAgainLater, Msg: "lease store busy"}}}
	}
	tries := 0
	fe.on("add beta", func(c call, ctx context.Context) ([]byte, error) {
		if tries++; tries < 3 {
			return busy(c, ctx)
		}
		return okResult(c, ""), nil
	})
	p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err != nil || tries != 3 {
		t.Fatalf("Create = %v after %d adds of beta, want a pod after 3", err, tries)
	}
	if err := f.m.Delete(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}

	fe.on("add beta", busy)
	fe.calls = nil
	start := time.Now()
	_, err = f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	took := time.Since(start)
	if !errors.Is(err, ErrTryAgainLater) || !errors.Is(err, netplugin.ErrPluginFailed) ||
		!strings.Contains(err.Error(), `network "beta"`) || !strings.Contains(err.Error(), "lease store busy") {
		t.Errorf("Create = %v, want ErrTryAgainLater naming beta with the plugin's message", err)
	}
	if took < 500*time.Millisecond || took > 3*time.Second {
		t.Errorf("gave up after %v with a 1s plugin timeout", took)
	}
	if n := len(fe.callsFor("add beta")); n < 3 {
		t.Errorf("beta's add ran %d times, want it retried", n)
	}
	if ids := f.onlyPodIDs(t); len(ids) != 0 {
		t.Errorf("journal holds %v: want the pod rolled back", ids)
	}
}

// TestGenerationsOfAttachments: each attachment journals the generation
// that served its add and its del goes there, even after another
// generation serves new pods; each pod holds the generations of its
// attachments until their dels succeeded.
func TestGenerationsOfAttachments(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	old, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	f.nets.serve("alpha", 2, "sha512-alpha2")
	neu, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	if neu.Attachments[0].Image != "sha512-alpha2" {
		t.Errorf("new pod's image %q", neu.Attachments[0].Image)
	}
	use := f.nets.holders()
	if want := map[netplugin.Target][]string{{Network: "alpha", Generation: 1}: {old.ID}, {Network: "alpha", Generation: 2}: {neu.ID}}; fmt.Sprint(use) != fmt.Sprint(want) {
		t.Errorf("held = %v, want %v", use, want)
	}
	for _, p := range []*state.Pod{old, neu} {
		if err := f.m.Delete(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	var gens []int
	for _, c := range fe.calls {
		gens = append(gens, c.Generation)
	}
	if fmt.Sprint(gens) != "[1 2 1 2]" {
		t.Errorf("generations of add, add, del, del = %v, want [1 2 1 2]", gens)
	}
	if use := f.nets.holders(); len(use) != 0 {
		t.Errorf("held with no pod = %v", use)
	}
}

// TestCreatesHoldWhatTheyResolved: a create holds the generations it
// resolved while it runs, even once another serves new pods; its adds go
// to the one it resolved.
func TestCreatesHoldWhatTheyResolved(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	entered, release := make(chan struct{}), make(chan struct{})
	fe.on("add alpha", func(c call, _ context.Context) ([]byte, error) {
		close(entered)
		<-release
		return okResult(c, ""), nil
	})
	errc := make(chan error, 1)
	go func() {
		_, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
		errc <- err
	}()
	<-entered
	f.nets.serve("alpha", 2, "")
	f.nets.serve("beta", 2, "")
	use := f.nets.holders()
	if len(use[netplugin.Target{Network: "beta", Generation: 1}]) != 1 || len(use[netplugin.Target{Network: "alpha", Generation: 1}]) != 1 {
		t.Errorf("held = %v while a create resolved alpha and beta generation 1", use)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if c := fe.callsFor("add beta"); len(c) != 1 || c[0].Generation != 1 {
		t.Errorf("add beta = %+v, want generation 1, the one the create resolved", c)
	}
}

// TestPodNames: names are unique among the pods kurmad holds; a pod with
// none gets a generated one; a name is free again once its pod is gone,
// and a restarted kurmad knows the journaled ones.
func TestPodNames(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	web, err := f.m.Create(ctx, CreateRequest{Name: "web", Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.m.Create(ctx, CreateRequest{Name: "web", Networks: []string{"beta"}})
	if !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), `"web" is the name of pod `+web.ID) {
		t.Errorf("second web = %v, want ErrNameInUse naming the first", err)
	}
	if n := len(fe.callsFor("add beta")); n != 0 {
		t.Errorf("a refused name ran %d adds", n)
	}
	anon, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	if adj, noun, ok := strings.Cut(anon.Name, "_"); !ok || adj == "" || noun == "" {
		t.Errorf("generated name %q, want adjective_noun", anon.Name)
	}
	if rec, _ := f.store.GetPod(anon.ID); rec.Name != anon.Name {
		t.Errorf("journaled name %q, want %q", rec.Name, anon.Name)
	}

	// A new Manager on the same journal (a restart) knows both names.
	m2 := f.newManager(t, fe, f.cfg)
	for _, name := range []string{"web", anon.Name} {
		if _, err := m2.Create(ctx, CreateRequest{Name: name, Networks: []string{"alpha"}}); !errors.Is(err, ErrNameInUse) {
			t.Errorf("after a restart, %s = %v, want ErrNameInUse", name, err)
		}
	}
	if err := m2.Delete(ctx, web.ID); err != nil {
		t.Fatal(err)
	}
	again, err := m2.Create(ctx, CreateRequest{Name: "web", Networks: []string{"alpha"}})
	if err != nil {
		t.Fatalf("web after its pod was deleted: %v", err)
	}
	for _, id := range []string{again.ID, anon.ID} {
		if err := m2.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
}

// TestPodNamesRace: of concurrent creates with one name, one wins.
func TestPodNamesRace(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := f.m.Create(context.Background(), CreateRequest{Name: "db", Networks: []string{"alpha"}})
			errs <- err
		}()
	}
	ok := 0
	for range 8 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case !errors.Is(err, ErrNameInUse):
			t.Errorf("Create = %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d creates named db succeeded, want 1", ok)
	}
	if recs, _ := f.store.ListPods(); len(recs) != 1 || recs[0].Phase != state.PhaseReady {
		t.Errorf("journal = %+v, want the one db", recs)
	}
}

// TestAddTimeoutNamesTheLimit: an add that runs into plugin_timeout fails
// with the limit as configured, though the call began with a moment less
// of it left (networkpod reports the time it was given: 299ms of 300ms).
func TestAddTimeoutNamesTheLimit(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	f.nets.setConfig(parseConfig(t, `{"plugin_timeout": "300ms", "pod_networks": [
		{"name": "alpha", "image": "file:///x.aci", "type": "fake"}]}`))
	fe.on("add alpha", func(_ call, ctx context.Context) ([]byte, error) {
		dl, _ := ctx.Deadline()
		left := time.Until(dl).Truncate(time.Millisecond)
		<-ctx.Done()
		return nil, &netplugin.NetworkError{Network: "alpha", Op: netplugin.AddPath, Err: &netplugin.TimeoutError{Limit: left}}
	})
	_, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha"}})
	var te *netplugin.TimeoutError
	if !errors.As(err, &te) || te.Limit != 300*time.Millisecond ||
		!strings.Contains(err.Error(), `network "alpha": /opt/network/add: timed out after 300ms`) {
		t.Fatalf("Create = %v, want the add's timeout of 300ms naming alpha", err)
	}
	if ids := f.onlyPodIDs(t); len(ids) != 0 {
		t.Errorf("journal holds %v: want the pod rolled back", ids)
	}
}
