package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// runtimeNetns makes a namespace as a container runtime would, holding a
// link of the runtime's own (ktprt), and returns its path.
func (e *realEnv) runtimeNetns(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(e.dir, "runtime")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := testutil.NewNetnsFile(t, filepath.Join(dir, name))
	testutil.AddLinksIn(t, p, "ktprt")
	return p
}

// attachRuntime makes a runtime namespace named ctr (see runtimeNetns) and
// attaches pnet1 to it as the runtime "test" would, under CNI network
// ktcni; it returns the pod and the runtime's netns path.
// runtimeSide is rt as the runtime gave it, without what kurmad journals
// beside (its namespace's identity, the boot ID).
func runtimeSide(rt state.Runtime) state.Runtime {
	rt.NetnsDev, rt.NetnsIno, rt.BootID = 0, 0, ""
	return rt
}

func (e *realEnv) attachRuntime(t *testing.T, m *Manager, ctr string) (*state.Pod, string) {
	t.Helper()
	src := e.runtimeNetns(t, ctr)
	p, err := m.Create(context.Background(), CreateRequest{Networks: []string{"pnet1"},
		Runtime: &state.Runtime{Owner: "test", ContainerID: ctr, Interface: "eth0", Network: "ktcni", Netns: src}})
	if err != nil {
		t.Fatal(err)
	}
	return p, src
}

// TestRealRuntimePod: a pod in a runtime's namespace gets the runtime's
// interface name on its first network and the first free ethN on the next
// (the runtime's link counts as taken); the namespace is bind-mounted at
// kurma's path; a second ADD of the same attachment is a conflict; a
// restart adopts it; the runtime's DEL releases everything kurma made and
// nothing of the runtime's: its file, its namespace, its link stay; a DEL
// again finds nothing and succeeds.
func TestRealRuntimePod(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	cfg := e.config(t, true)
	m := e.manager(t, cfg, store)
	ctx := context.Background()
	src := e.runtimeNetns(t, "ctr1")
	rt := &state.Runtime{Owner: "test", ContainerID: "ctr1", Interface: "net0", Network: "ktcni", Netns: src}
	p, err := m.Create(ctx, CreateRequest{Name: "ns/web", Networks: []string{"pnet1", "pnet2"}, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{p.Attachments[0].Interface, p.Attachments[1].Interface}; !slices.Equal(got, []string{"net0", "eth0"}) {
		t.Errorf("interfaces %v, want the runtime's net0 then eth0", got)
	}
	if p.Netns != filepath.Join(e.netns, p.ID) || p.Runtime == nil || runtimeSide(*p.Runtime) != *rt {
		t.Errorf("pod netns %s runtime %+v", p.Netns, p.Runtime)
	}
	if !sameNetns(t, src, p.Netns) {
		t.Fatal("the pod's netns is not the runtime's namespace")
	}
	if !testutil.HasIP(testutil.IPv4In(t, src, "net0"), resultOf(t, p.Attachments[0]).IPs[0].Address.IP) {
		t.Error("net0 in the runtime's namespace lacks its IP")
	}
	// The runtime writes the container's resolv.conf from the result's DNS
	// (pnet2 has some): kurmad makes no copy.
	if _, err := os.Lstat(filepath.Join(e.pods, p.ID)); !os.IsNotExist(err) {
		t.Errorf("a runtime's pod has a pod dir (%v), want none", err)
	}

	_, err = m.Create(ctx, CreateRequest{Networks: []string{"pnet1"}, Runtime: rt})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), p.ID) {
		t.Errorf("second ADD = %v, want ErrConflict naming %s", err, p.ID)
	}

	m2 := e.manager(t, cfg, store)
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Get(p.ID); err != nil {
		t.Fatalf("not adopted after a restart: %v", err)
	}

	ids, err := m2.DeleteRuntime(ctx, RuntimeRef{ContainerID: "ctr1", Interface: "net0", Network: "ktcni"})
	if err != nil || !slices.Equal(ids, []string{p.ID}) {
		t.Fatalf("DeleteRuntime = %v, %v", ids, err)
	}
	e.assertClean(t, store)
	links, err := netnsfile.Links(src)
	if err != nil {
		t.Fatalf("the runtime's namespace: %v", err)
	}
	slices.Sort(links)
	if !slices.Equal(links, []string{"ktprt", "lo"}) {
		t.Errorf("links left in the runtime's namespace %v, want its own: ktprt, lo", links)
	}
	if ids, err := m2.DeleteRuntime(ctx, RuntimeRef{ContainerID: "ctr1", Interface: "net0", Network: "ktcni"}); err != nil || len(ids) != 0 {
		t.Errorf("DEL again = %v, %v; want nothing, no error", ids, err)
	}
}

// TestRealLoopbackTakesNoInterface: a network of CNI's loopback plugin
// without containerInterface makes no interface, so it takes neither the
// first ethN nor a runtime's CNI_IFNAME from the network after it: a pod
// on lonet then pnet2 has pnet2 on eth0, and a runtime pod on lonet then
// pnet1 has pnet1 on the runtime's net0, its IP there.
func TestRealLoopbackTakesNoInterface(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, true), store)
	ctx := context.Background()
	ifnames := func(p *state.Pod) []string {
		var out []string
		for _, a := range p.Attachments {
			out = append(out, a.Interface)
		}
		return out
	}
	p, err := m.Create(ctx, CreateRequest{Networks: []string{"lonet", "pnet2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := ifnames(p); !slices.Equal(got, []string{"lo", "eth0"}) {
		t.Errorf("kurmad's pod on lonet, pnet2: interfaces %v, want lo, eth0", got)
	}
	if !testutil.HasIP(testutil.IPv4In(t, p.Netns, "eth0"), resultOf(t, p.Attachments[1]).IPs[0].Address.IP) {
		t.Error("eth0 lacks pnet2's IP")
	}
	src := e.runtimeNetns(t, "ctrlo")
	rp, err := m.Create(ctx, CreateRequest{Networks: []string{"lonet", "pnet1"},
		Runtime: &state.Runtime{Owner: "test", ContainerID: "ctrlo", Interface: "net0", Network: "ktcni", Netns: src}})
	if err != nil {
		t.Fatal(err)
	}
	if got := ifnames(rp); !slices.Equal(got, []string{"lo", "net0"}) {
		t.Errorf("runtime pod on lonet, pnet1 with CNI_IFNAME net0: interfaces %v, want lo, net0", got)
	}
	if !testutil.HasIP(testutil.IPv4In(t, src, "net0"), resultOf(t, rp.Attachments[1]).IPs[0].Address.IP) {
		t.Error("net0 in the runtime's namespace lacks pnet1's IP")
	}
	e.deleteAll(t, m, store, p, rp)
}

// TestRealRuntimeFailedAddLeavesRuntimeNetns: an add that fails is rolled
// back, and the rollback removes kurma's bind mount, not the runtime's
// namespace or link.
func TestRealRuntimeFailedAddLeavesRuntimeNetns(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, false), store)
	src := e.runtimeNetns(t, "ctrfail")
	_, err := m.Create(context.Background(), CreateRequest{Networks: []string{"pnet1", "chain"},
		Runtime: &state.Runtime{Owner: "test", ContainerID: "ctrfail", Interface: "eth0", Netns: src}})
	var ne *netplugin.NetworkError
	if !errors.As(err, &ne) || ne.Network != "chain" {
		t.Fatalf("Create = %v, want chain's failure", err)
	}
	e.assertClean(t, store)
	if links, err := netnsfile.Links(src); err != nil || !slices.Contains(links, "ktprt") || slices.Contains(links, "eth0") {
		t.Errorf("runtime's namespace after the rollback: %v, %v", links, err)
	}
}

// TestRealRuntimeBadNetns: a runtime naming kurmad's own namespace, or
// nothing, is a bad request, and nothing is left.
func TestRealRuntimeBadNetns(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, false), store)
	for _, ns := range []string{"/proc/self/ns/net", filepath.Join(e.dir, "none")} {
		_, err := m.Create(context.Background(), CreateRequest{Networks: []string{"pnet1"},
			Runtime: &state.Runtime{Owner: "test", ContainerID: "bad", Interface: "eth0", Netns: ns}})
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("netns %s: %v, want ErrBadRequest", ns, err)
		}
	}
	e.assertClean(t, store)
}

// TestRealRuntimeGC: GC of a CNI network by a runtime releases exactly
// that runtime's attachments missing from the valid list; other CNI
// networks', other runtimes' on the same CNI network and kurmad's own pods
// stay.
func TestRealRuntimeGC(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, false), store)
	ctx := context.Background()
	mk := func(ctr, network, owner string) *state.Pod {
		t.Helper()
		p, err := m.Create(ctx, CreateRequest{Networks: []string{"pnet1"},
			Runtime: &state.Runtime{Owner: owner, ContainerID: ctr, Interface: "eth0", Network: network, Netns: e.runtimeNetns(t, ctr)}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid, stale, other := mk("gc1", "ktcni", "test"), mk("gc2", "ktcni", "test"), mk("gc3", "ktother", "test")
	otherOwner := mk("gc4", "ktcni", "otherrt")
	own, err := m.Create(ctx, CreateRequest{Networks: []string{"pnet1"}})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := m.GCRuntime(ctx, "ktcni", "test", []RuntimeRef{{ContainerID: "gc1", Interface: "eth0"}, {ContainerID: "gone", Interface: "eth0"}})
	if err != nil || !slices.Equal(ids, []string{stale.ID}) {
		t.Fatalf("GCRuntime = %v, %v; want only %s", ids, err, stale.ID)
	}
	for _, p := range []*state.Pod{valid, other, otherOwner, own} {
		if _, err := m.Get(p.ID); err != nil {
			t.Errorf("pod %s released: %v", p.ID, err)
		}
	}
	e.deleteAll(t, m, store, valid, other, otherOwner, own)
}

// TestRealRuntimeConfig: capability arguments reach the plugin of a network
// that declares them (capnet's host-local takes the IP asked for), travel
// in the journaled snapshot, and are refused for a network the pod does not
// join.
func TestRealRuntimeConfig(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, false), store)
	ctx := context.Background()
	rc := map[string]netconfig.RuntimeConfig{"capnet": {"ips": json.RawMessage(`["10.203.4.77/16"]`), "mac": json.RawMessage(`"c2:00:00:00:00:09"`)}}
	p, err := m.Create(ctx, CreateRequest{Networks: []string{"pnet1", "capnet"}, RuntimeConfig: rc})
	if err != nil {
		t.Fatal(err)
	}
	if got := ipOf(t, p, "capnet"); got != "10.203.4.77" {
		t.Errorf("capnet IP %s, want the runtimeConfig's 10.203.4.77", got)
	}
	var snap struct {
		RuntimeConfig map[string]any `json:"runtimeConfig"`
	}
	if err := json.Unmarshal(p.Attachments[1].Config, &snap); err != nil || len(snap.RuntimeConfig) != 1 || snap.RuntimeConfig["ips"] == nil {
		t.Errorf("capnet's snapshot runtimeConfig %v (%v), want ips only (mac is not declared)", snap.RuntimeConfig, err)
	}
	if err := m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t, store)
	_, err = m.Create(ctx, CreateRequest{Networks: []string{"pnet1"}, RuntimeConfig: rc})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `"capnet"`) {
		t.Errorf("runtime config for a network not joined: %v, want ErrBadRequest naming it", err)
	}
}

// TestRealInterfaces: a create that names a network's interface gets it
// in the pod (the others keep their ethN), and one naming a network the
// pod does not join is refused naming it.
func TestRealInterfaces(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, false), store)
	ctx := context.Background()
	p, err := m.Create(ctx, CreateRequest{Networks: []string{"pnet1", "capnet"}, Interfaces: map[string]string{"capnet": "net1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{p.Attachments[0].Interface, p.Attachments[1].Interface}; got[0] != "eth0" || got[1] != "net1" {
		t.Errorf("interfaces %v, want [eth0 net1]", got)
	}
	links, err := netnsfile.Links(p.Netns)
	if err != nil || !slices.Contains(links, "net1") {
		t.Errorf("links in the pod %v (%v), want net1 among them", links, err)
	}
	if err := m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t, store)
	_, err = m.Create(ctx, CreateRequest{Networks: []string{"pnet1"}, Interfaces: map[string]string{"capnet": "net1"}})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `"capnet"`) {
		t.Errorf("an interface for a network not joined: %v, want ErrBadRequest naming it", err)
	}
}

// TestRealRuntimePodNames: runtime pods are outside the unique-name rule:
// one container on two CNI networks is two pods with the container's name
// (as podman passes it), and they hold no name against kurmad's own pods,
// also after a restart rebuilt the name index from the journal; kurmad's
// own pods keep the rule among themselves.
func TestRealRuntimePodNames(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	cfg := e.config(t, false)
	m := e.manager(t, cfg, store)
	ctx := context.Background()
	src := e.runtimeNetns(t, "ctrnames")
	var made []*state.Pod
	create := func(m *Manager, req CreateRequest) (*state.Pod, error) {
		p, err := m.Create(ctx, req)
		if err == nil {
			made = append(made, p)
		}
		return p, err
	}
	for i, cniNet := range []string{"ktcni", "ktcni2"} {
		rt := &state.Runtime{Owner: "podman", ContainerID: "ctrnames", Interface: fmt.Sprintf("eth%d", i), Network: cniNet, Netns: src}
		if p, err := create(m, CreateRequest{Name: "web", Networks: []string{"pnet1"}, Runtime: rt}); err != nil || p.Name != "web" {
			t.Fatalf("runtime pod on %s named web: %+v, %v", cniNet, p, err)
		}
	}
	own, err := create(m, CreateRequest{Name: "web", Networks: []string{"pnet1"}})
	if err != nil {
		t.Fatalf("kurmad's own pod named web beside runtime pods of that name: %v", err)
	}
	if _, err := create(m, CreateRequest{Name: "web", Networks: []string{"pnet1"}}); !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), own.ID) {
		t.Errorf("a second own pod named web: %v, want ErrNameInUse naming %s", err, own.ID)
	}

	m2 := e.manager(t, cfg, store)
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := create(m2, CreateRequest{Name: "web", Networks: []string{"pnet1"}}); !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), own.ID) {
		t.Errorf("after a restart, an own pod named web: %v, want ErrNameInUse naming %s", err, own.ID)
	}
	rt := &state.Runtime{Owner: "podman", ContainerID: "ctrnames2", Interface: "eth0", Network: "ktcni", Netns: e.runtimeNetns(t, "ctrnames2")}
	if _, err := create(m2, CreateRequest{Name: "web", Networks: []string{"pnet1"}, Runtime: rt}); err != nil {
		t.Errorf("after a restart, a runtime pod named web: %v", err)
	}
	e.deleteAll(t, m2, store, made...)
}

// TestRealCollectUnbindsRuntimeOrphan: when the journal lost a runtime's
// pod, Collect's gc releases what kurma's plugin made for it (its veth in
// the runtime's namespace, its lease), and the orphan sweep then only
// unmounts kurmad's bind mount: the runtime's namespace and its own link
// stay (a flush, as a kurmad-made pod's teardown does, would delete them).
func TestRealCollectUnbindsRuntimeOrphan(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	cfg := e.config(t, false)
	m := e.manager(t, cfg, store)
	ctx := context.Background()
	p, src := e.attachRuntime(t, m, "ctrorphan")
	if err := store.DeletePod(p.ID); err != nil { // the journal lost it
		t.Fatal(err)
	}
	m2 := e.manager(t, cfg, store)
	if n := m2.Collect(ctx); n != 0 {
		t.Fatalf("Collect: %d networks' gc failed", n)
	}
	if _, err := os.Lstat(p.Netns); !os.IsNotExist(err) {
		t.Errorf("the orphan bind mount %s is still there (%v)", p.Netns, err)
	}
	links, err := netnsfile.Links(src)
	if err != nil {
		t.Fatalf("the runtime's namespace: %v", err)
	}
	slices.Sort(links)
	if !slices.Equal(links, []string{"ktprt", "lo"}) {
		t.Errorf("links in the runtime's namespace %v, want its own (ktprt, lo): kurma's eth0 gone by gc, nothing flushed", links)
	}
	e.assertClean(t, store)
}

func sameNetns(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}
