package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/state"
)

// droppedHooks records what a Manager reported through RuntimeDropped
// and RuntimeRebound.
type droppedHooks struct {
	mu      sync.Mutex
	reasons []string
	rebound int
}

func (h *droppedHooks) install(m *Manager) {
	m.opts.RuntimeDropped = func(reason string) {
		h.mu.Lock()
		h.reasons = append(h.reasons, reason)
		h.mu.Unlock()
	}
	m.opts.RuntimeRebound = func() {
		h.mu.Lock()
		h.rebound++
		h.mu.Unlock()
	}
}

// removeByHand unmounts and removes a runtime's netns file, as podman does
// when a container is removed (kurmad's bind mount, if any, keeps the
// namespace alive).
func removeByHand(t *testing.T, path string) {
	t.Helper()
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestRealRuntimeDropped: a runtime pod whose runtime's netns path names
// no namespace any more (its file removed), or another namespace (the
// path reused), is released by CheckRuntimes through the real plugins'
// del, which still find its veth in the namespace kurmad's bind mount
// holds: no veth, no lease, no netns file, no record left, and the new
// namespace at the reused path is not touched. A live one is left alone.
func TestRealRuntimeDropped(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, false), store)
	var hooks droppedHooks
	hooks.install(m)
	ctx := context.Background()
	live, _ := e.attachRuntime(t, m, "live")
	_, goneSrc := e.attachRuntime(t, m, "gone")
	_, reusedSrc := e.attachRuntime(t, m, "reused")
	if ports := bridgePorts(t); len(ports) != 3 {
		t.Fatalf("veths on the bridge %v, want 3", ports)
	}

	removeByHand(t, goneSrc)
	removeByHand(t, reusedSrc)
	testutil.NewNetnsFile(t, reusedSrc)
	testutil.AddLinksIn(t, reusedSrc, "ktpnew")

	got := m.CheckRuntimes(ctx)
	if got != (RuntimeCheck{Live: 1, Released: 2}) {
		t.Errorf("CheckRuntimes = %+v, want 1 live, 2 released", got)
	}
	slices.Sort(hooks.reasons)
	if !slices.Equal(hooks.reasons, []string{DroppedNetnsGone, DroppedNetnsReplaced}) {
		t.Errorf("RuntimeDropped heard %v", hooks.reasons)
	}
	if ports := bridgePorts(t); len(ports) != 1 {
		t.Errorf("veths on the bridge after the release %v, want the live pod's alone", ports)
	}
	if ips := e.reservedIPs(t); len(ips) != 1 {
		t.Errorf("leases after the release %v, want the live pod's alone", ips)
	}
	if links, err := netnsfile.Links(reusedSrc); err != nil || !slices.Equal(links, []string{"ktpnew", "lo"}) && !slices.Equal(links, []string{"lo", "ktpnew"}) {
		t.Errorf("the new namespace at the reused path: %v, %v; want it untouched", links, err)
	}
	if pods := m.List(); len(pods) != 1 || pods[0].ID != live.ID || !netnsfile.IsMounted(live.Netns) {
		t.Fatalf("pods after the release: %+v, want the live one, mounted", pods)
	}
	e.deleteAll(t, m, store, live)
}

// TestRealRuntimeRebound: kurmad's bind mount of a live runtime
// container's namespace is lost (unmounted while kurmad was down, its file
// left or gone): the next boot's Reconcile binds it again and adopts the
// pod: its interface keeps its address, its lease stays; CheckRuntimes
// does the same while kurmad runs. The runtime's DEL then releases
// everything. With the runtime's namespace gone too, Reconcile releases
// the pod.
func TestRealRuntimeRebound(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	cfg := e.config(t, false)
	m := e.manager(t, cfg, store)
	ctx := context.Background()
	p, src := e.attachRuntime(t, m, "rebound")
	ip := resultOf(t, p.Attachments[0]).IPs[0].Address.IP
	kept := func(when string) {
		t.Helper()
		if !netnsfile.IsMounted(p.Netns) || !sameNetns(t, src, p.Netns) {
			t.Fatalf("%s: %s is not bound to the runtime's namespace", when, p.Netns)
		}
		if !testutil.HasIP(testutil.IPv4In(t, src, "eth0"), ip) || len(e.reservedIPs(t)) != 1 {
			t.Fatalf("%s: eth0 lost %v or its lease (%v)", when, ip, e.reservedIPs(t))
		}
		if _, err := m.Get(p.ID); err != nil {
			t.Fatalf("%s: the pod is gone: %v", when, err)
		}
	}

	// Unmounted while kurmad was down, the file left: a restart.
	if err := unix.Unmount(p.Netns, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	m = e.manager(t, cfg, store)
	var hooks droppedHooks
	hooks.install(m)
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	kept("after a restart")

	// Lost with its file while kurmad runs.
	removeByHand(t, p.Netns)
	if got := m.CheckRuntimes(ctx); got != (RuntimeCheck{Rebound: 1}) {
		t.Errorf("CheckRuntimes = %+v, want 1 rebound", got)
	}
	kept("after CheckRuntimes")
	if hooks.rebound != 2 || len(hooks.reasons) != 0 {
		t.Errorf("hooks heard %d rebinds and drops %v, want 2 and none", hooks.rebound, hooks.reasons)
	}
	if _, err := m.DeleteRuntime(ctx, RuntimeRef{ContainerID: "rebound", Interface: "eth0", Network: "ktcni"}); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t, store)

	// Both gone while kurmad was down: the namespace is really gone.
	p2, src2 := e.attachRuntime(t, m, "bothgone")
	removeByHand(t, p2.Netns)
	removeByHand(t, src2)
	m = e.manager(t, cfg, store)
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	// The kernel destroys an unreferenced namespace, and the veth with
	// it, in the background.
	testutil.WaitFor(t, 10*time.Second, "the gone namespace's veth to go", func() error {
		if ports := bridgePorts(t); len(ports) > 0 {
			return fmt.Errorf("veths on the bridge: %v", ports)
		}
		return nil
	})
	e.assertClean(t, store)
}

// TestRuntimeReleaseShown: a dropped runtime pod whose del fails stays,
// failed, showing why it is released (Runtime's Dropped and DroppedAt)
// until a later teardown succeeds; CheckRuntimes leaves it to the retries
// (it is no longer ready). kurmad's own pods are never looked at.
func TestRuntimeReleaseShown(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	src := testutil.NewNetnsFile(t, filepath.Join(t.TempDir(), "rtshown"))
	p, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"},
		Runtime: &state.Runtime{Owner: "test", ContainerID: "shown", Interface: "eth0", Network: "ktcni", Netns: src}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	removeByHand(t, src)
	errDel := errors.New("del refused")
	fe.on("del alpha", func(call, context.Context) ([]byte, error) { return nil, errDel })
	if got := f.m.CheckRuntimes(ctx); got != (RuntimeCheck{Waiting: 1}) {
		t.Fatalf("CheckRuntimes = %+v, want 1 waiting", got)
	}
	got, err := f.m.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != state.PhaseFailed || got.Runtime.Dropped == "" || got.Runtime.DroppedAt.IsZero() || !netnsfile.IsMounted(p.Netns) {
		t.Fatalf("pod while its release waits: phase %s runtime %+v, want failed, dropped, its netns kept", got.Phase, got.Runtime)
	}
	if again := f.m.CheckRuntimes(ctx); again != (RuntimeCheck{}) {
		t.Errorf("second CheckRuntimes = %+v, want nothing looked at", again)
	}
	fe.on("del alpha", nil)
	if err := f.m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	f.assertGone(t, p.ID)
	if _, err := f.m.Get(own.ID); err != nil {
		t.Errorf("kurmad's own pod: %v", err)
	}
}

// TestRuntimeRebootReleased: a runtime pod journals the boot it was made
// in; one journaled in another boot is released even though its runtime's
// path names a live namespace of the same identity (after a reboot the
// kernel hands out inodes and pids again, so a new namespace at a
// /proc/<pid>/ns/net path can match): its del runs, and nothing is bound
// again. The namespace at the runtime's path is left alone.
func TestRuntimeRebootReleased(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	if f.m.bootID == "" {
		t.Fatalf("no boot ID read from %s", bootIDPath)
	}
	src := testutil.NewNetnsFile(t, filepath.Join(t.TempDir(), "rtreboot"))
	p, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"},
		Runtime: &state.Runtime{Owner: "test", ContainerID: "reboot", Interface: "eth0", Network: "ktcni", Netns: src}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := f.store.GetPod(p.ID)
	if err != nil || rec.Runtime.BootID != f.m.bootID {
		t.Fatalf("journaled boot ID %q (%v), want this boot's %q", rec.Runtime.BootID, err, f.m.bootID)
	}
	if got := f.m.CheckRuntimes(ctx); got != (RuntimeCheck{Live: 1}) {
		t.Fatalf("CheckRuntimes in the same boot = %+v, want 1 live", got)
	}

	// As after a reboot that lost kurmad's bind mount: the journal says
	// another boot, the runtime's path names a namespace of the journaled
	// identity.
	if err := f.store.UpdatePod(p.ID, func(r *state.Pod) error { r.Runtime.BootID = "another-boot"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := netnsfile.Unbind(p.Netns); err != nil {
		t.Fatal(err)
	}
	var hooks droppedHooks
	hooks.install(f.m)
	if got := f.m.CheckRuntimes(ctx); got != (RuntimeCheck{Released: 1}) {
		t.Fatalf("CheckRuntimes after a reboot = %+v, want 1 released", got)
	}
	if hooks.rebound != 0 || !slices.Equal(hooks.reasons, []string{DroppedNetnsGone}) {
		t.Errorf("hooks heard %d rebinds and drops %v, want none and netns_gone", hooks.rebound, hooks.reasons)
	}
	if dels := fe.callsFor("del alpha"); len(dels) != 1 {
		t.Errorf("dels run: %d, want 1", len(dels))
	}
	f.assertGone(t, p.ID)
	if _, err := netnsfile.Identify(src); err != nil {
		t.Errorf("the namespace at the runtime's path: %v, want it left alone", err)
	}
}

// TestRuntimeIdentityJournaled: a live runtime pod journaled by a kurmad
// that kept neither the identity of the runtime's namespace nor the boot
// gets both from kurmad's bind mount at its first check; so a later loss
// of that bind mount is bound again, not left unknown for good.
func TestRuntimeIdentityJournaled(t *testing.T) {
	f := newFixture(t, newFakeExec())
	ctx := context.Background()
	src := testutil.NewNetnsFile(t, filepath.Join(t.TempDir(), "rtold"))
	p, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"},
		Runtime: &state.Runtime{Owner: "test", ContainerID: "old", Interface: "eth0", Network: "ktcni", Netns: src}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := netnsfile.Identify(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.UpdatePod(p.ID, func(r *state.Pod) error {
		r.Runtime.NetnsDev, r.Runtime.NetnsIno, r.Runtime.BootID = 0, 0, ""
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := f.m.CheckRuntimes(ctx); got != (RuntimeCheck{Live: 1}) {
		t.Fatalf("CheckRuntimes = %+v, want 1 live", got)
	}
	rec, err := f.store.GetPod(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := netnsID(rec.Runtime); got != want || rec.Runtime.BootID != f.m.bootID {
		t.Errorf("journaled identity %v boot %q, want %v boot %q", got, rec.Runtime.BootID, want, f.m.bootID)
	}
	if err := unix.Unmount(p.Netns, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if got := f.m.CheckRuntimes(ctx); got != (RuntimeCheck{Rebound: 1}) {
		t.Errorf("CheckRuntimes after the bind mount was lost = %+v, want 1 rebound", got)
	}
	if !netnsfile.IsMounted(p.Netns) || !sameNetns(t, src, p.Netns) {
		t.Errorf("%s is not bound to the runtime's namespace again", p.Netns)
	}
	if err := f.m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	f.assertGone(t, p.ID)
}
