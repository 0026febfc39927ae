package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/cniresult"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// call is one plugin run seen by fakeExec.
type call struct {
	Network, Path string
	Generation    int
	Args          []string
	Stdin         string
	CtxErr        error // the context's error when the call was made
	Held          bool  // it came held (netplugin.Call.HeldUntil)
}

func (c call) String() string { return filepath.Base(c.Path) + " " + c.Network }

// fakeExec records calls and answers them from per "verb network" rules;
// the default add answer is a 1.0.0 result putting an interface in the
// netns (args[0]) under the given ifname (args[2]) or "plug0".
type fakeExec struct {
	mu    sync.Mutex
	calls []call
	rules map[string]func(c call, ctx context.Context) ([]byte, error)
}

func newFakeExec() *fakeExec {
	return &fakeExec{rules: map[string]func(call, context.Context) ([]byte, error){}}
}

func (f *fakeExec) on(verbNet string, fn func(c call, ctx context.Context) ([]byte, error)) {
	f.mu.Lock()
	f.rules[verbNet] = fn
	f.mu.Unlock()
}

func (f *fakeExec) Exec(ctx context.Context, pc netplugin.Call) ([]byte, []byte, error) {
	// It cannot hold a call: it waits for the hold before the call starts.
	_, hold := pc.HeldStdin()
	stdin, err := pc.Stdin()
	if err != nil {
		return nil, nil, err
	}
	c := call{Network: pc.Network, Generation: pc.Generation, Path: pc.Path, Args: append([]string(nil), pc.Args...), Stdin: string(stdin),
		CtxErr: ctx.Err(), Held: hold != nil}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	fn := f.rules[c.String()]
	f.mu.Unlock()
	if fn != nil {
		out, err := fn(c, ctx)
		return out, []byte("fake stderr"), err
	}
	if pc.Path != netplugin.AddPath {
		return nil, nil, nil
	}
	return okResult(c, ""), nil, nil
}

func (f *fakeExec) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.String())
	}
	return out
}

func (f *fakeExec) callsFor(verbNet string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.String() == verbNet {
			out = append(out, c)
		}
	}
	return out
}

// fakeAddresses numbers okResult's addresses.
var fakeAddresses atomic.Int64

func okResult(c call, dns string) []byte {
	ifname := "plug0"
	if len(c.Args) > 2 {
		ifname = c.Args[2]
	}
	// Each add its own address, as an IPAM plugin gives: kurmad refuses
	// one that another attachment of the network holds.
	n := fakeAddresses.Add(1)
	s := fmt.Sprintf(`{"cniVersion":"1.0.0","interfaces":[{"name":"veth-host"},{"name":%q,"sandbox":%q}],"ips":[{"interface":1,"address":"10.203.%d.%d/16"}]%s}`,
		ifname, c.Args[0], n/250%250, n%250+1, dns)
	return []byte(s)
}

const fakeConfig = `{"pod_networks": [
	{"name": "alpha", "image": "file:///x.aci", "default": true, "containerInterface": "eth{{num}}", "type": "fake", "alpha": 1},
	{"name": "beta", "image": "file:///x.aci", "containerInterface": "eth{{num}}", "type": "fake", "beta": 2},
	{"name": "gamma", "image": "file:///x.aci", "default": true, "type": "fake", "gamma": 3}
]}`

type fixture struct {
	m       *Manager
	nets    *fakeNetworks // the last Manager's
	exec    *fakeExec
	store   *state.Store
	netns   string
	pods    string
	cfg     *netconfig.Config
	hostDNS string
}

// fakeNetworks is Networks for the tests above it: every network of its
// config served by generation 1, whose image is "sha512-<name>" (serve
// changes that), a generation ready unless down names its network or
// running does not list it, the holders of each generation recorded, and a
// network's gc run in its serving generation when that one runs, else in
// the newest that runs, with confs' config for it (the config's entry for
// the serving one; a network the config lacks, the snapshot of its newest
// journaled attachment, as networks.Controller runs it).
type fakeNetworks struct {
	mu      sync.Mutex
	cfg     *netconfig.Config
	to      map[string]netplugin.Serving
	down    map[string]error // by network
	running map[string][]int // by network, newest first; nil: each serving generation runs
	confs   map[netplugin.Target][]byte
	held    map[netplugin.Target]map[string]bool
	gone    map[netplugin.Target]bool // Retain fails for these
	asked   []netplugin.Target        // Ready's questions
	started chan struct{}
}

// newFakeNetworks serves cfg, its generations held by the journal's pods;
// t is nil in a helper process (a journal it cannot read panics).
func newFakeNetworks(t testing.TB, cfg *netconfig.Config, store *state.Store) *fakeNetworks {
	n := &fakeNetworks{down: map[string]error{}, confs: map[netplugin.Target][]byte{},
		held: map[netplugin.Target]map[string]bool{}, gone: map[netplugin.Target]bool{}, started: make(chan struct{})}
	n.setConfig(cfg)
	recs, err := store.ListPods()
	if err != nil && t == nil {
		panic(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		for _, a := range r.Attachments {
			if a.Deleted {
				continue
			}
			k := netplugin.Target{Network: a.Network, Generation: a.Generation}
			n.hold(r.ID, k)
			if _, ok := cfg.Network(a.Network); !ok {
				n.confs[k] = a.Config
			}
		}
	}
	return n
}

// setConfig makes new pods attach to cfg's networks, each served by
// generation 1 unless serve said otherwise.
func (n *fakeNetworks) setConfig(cfg *netconfig.Config) {
	n.mu.Lock()
	defer n.mu.Unlock()
	to := map[string]netplugin.Serving{}
	for _, e := range cfg.Networks {
		r, ok := n.to[e.Name]
		if !ok {
			r = netplugin.Serving{Target: netplugin.Target{Network: e.Name, Generation: 1}, Image: "sha512-" + e.Name}
		}
		to[e.Name] = r
	}
	n.cfg, n.to = cfg, to
}

// serve makes new pods of network attach through generation gen, running
// image.
func (n *fakeNetworks) serve(network string, gen int, image string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	to := maps.Clone(n.to)
	to[network] = netplugin.Serving{Target: netplugin.Target{Network: network, Generation: gen}, Image: image}
	n.to = to
}

// setRunning says which generations of network run, newest first.
func (n *fakeNetworks) setRunning(network string, gens ...int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running == nil {
		n.running = map[string][]int{}
	}
	n.running[network] = gens
}

// start says a generation started running (Started).
func (n *fakeNetworks) start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.started)
	n.started = make(chan struct{})
}

// holders lists, by generation, who holds it.
func (n *fakeNetworks) holders() map[netplugin.Target][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[netplugin.Target][]string{}
	for k, hs := range n.held {
		for h := range hs {
			out[k] = append(out[k], h)
		}
		slices.Sort(out[k])
	}
	return out
}

func (n *fakeNetworks) hold(holder string, k netplugin.Target) {
	if n.held[k] == nil {
		n.held[k] = map[string]bool{}
	}
	n.held[k][holder] = true
}

func (n *fakeNetworks) Serving() (*netconfig.Config, map[string]netplugin.Serving) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg, n.to
}

func (n *fakeNetworks) Ready(t netplugin.Target) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.asked = append(n.asked, t)
	if n.running != nil && !slices.Contains(n.running[t.Network], t.Generation) {
		return fmt.Errorf("generation %d: %w", t.Generation, netplugin.ErrUnavailable)
	}
	return n.down[t.Network]
}

func (n *fakeNetworks) Retain(holder string, ts ...netplugin.Target) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range ts {
		if n.gone[t] {
			return &netplugin.NetworkError{Network: t.Network, Err: fmt.Errorf("%w %d", netplugin.ErrUnknownGeneration, t.Generation)}
		}
	}
	for _, t := range ts {
		n.hold(holder, t)
	}
	return nil
}

func (n *fakeNetworks) Release(holder string, ts ...netplugin.Target) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range ts {
		delete(n.held[t], holder)
		if len(n.held[t]) == 0 {
			delete(n.held, t)
		}
	}
}

func (n *fakeNetworks) GCTarget(network string) (netplugin.Target, []byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, inConfig := n.to[network]
	t := r.Target
	if !inConfig {
		t = netplugin.Target{Network: network, Generation: -1}
		for k := range n.confs {
			if k.Network == network && k.Generation > t.Generation {
				t = k
			}
		}
		if t.Generation < 0 {
			return t, nil, fmt.Errorf("%w %q", netplugin.ErrUnknownNetwork, network)
		}
	}
	if n.running != nil {
		switch running := n.running[network]; {
		case len(running) == 0:
			return t, nil, fmt.Errorf("%w: none runs", netplugin.ErrUnavailable)
		case !inConfig || !slices.Contains(running, r.Generation):
			t.Generation = running[0]
		}
	}
	if conf, ok := n.confs[t]; ok {
		return t, conf, nil
	}
	e, _ := n.cfg.Network(network)
	conf, err := e.PluginConfig(nil)
	return t, conf, err
}

func (n *fakeNetworks) Started() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.started
}

// resultOf is attachment a's journaled result, parsed (nil without one).
func resultOf(t testing.TB, a state.Attachment) *current.Result {
	t.Helper()
	if len(a.Result) == 0 {
		return nil
	}
	res, err := cniresult.Parse(a.Result, "")
	if err != nil {
		t.Fatalf("%s's journaled result %s: %v", a.Network, a.Result, err)
	}
	return res
}

func parseConfig(t *testing.T, s string) *netconfig.Config {
	t.Helper()
	cfg, err := netconfig.Parse([]byte(s), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newFixture(t *testing.T, exec Execer) *fixture {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	store, err := state.Open(filepath.Join(dir, "kurmad.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := &fixture{store: store, netns: filepath.Join(dir, "netns"), pods: filepath.Join(dir, "pods"),
		cfg: parseConfig(t, fakeConfig), hostDNS: filepath.Join(dir, "host-resolv.conf")}
	if fe, ok := exec.(*fakeExec); ok {
		f.exec = fe
	}
	if err := os.WriteFile(f.hostDNS, []byte("nameserver 192.0.2.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.m = f.newManager(t, exec, f.cfg)
	// Whatever a failing test leaves mounted goes.
	t.Cleanup(func() {
		entries, _ := os.ReadDir(f.netns)
		for _, e := range entries {
			_ = netnsfile.Remove(filepath.Join(f.netns, e.Name()))
		}
	})
	return f
}

// newManager returns a Manager over the fixture's journal and dirs with
// cfg, as a kurmad restarted with an edited config makes one.
func (f *fixture) newManager(t *testing.T, exec Execer, cfg *netconfig.Config) *Manager {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	log.SetOutput(testutil.LogWriter(t))
	f.nets = newFakeNetworks(t, cfg, f.store)
	m, err := New(Options{Networks: f.nets, Exec: exec, Store: f.store, NetnsDir: f.netns, PodsDir: f.pods,
		HostResolvConf:  f.hostDNS,
		TeardownTimeout: 10 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Wait) // what its deletes do after their answers logs to t
	return m
}

// assertGone checks a pod left no netns, pod dir or journal record.
func (f *fixture) assertGone(t *testing.T, id string) {
	t.Helper()
	f.m.Wait() // a delete removes the pod's dir after its answer
	if _, err := os.Lstat(filepath.Join(f.netns, id)); !os.IsNotExist(err) {
		t.Errorf("netns file of %s still there (%v)", id, err)
	}
	if _, err := os.Lstat(filepath.Join(f.pods, id)); !os.IsNotExist(err) {
		t.Errorf("pod dir of %s still there (%v)", id, err)
	}
	if _, err := f.store.GetPod(id); err == nil {
		t.Errorf("journal still holds %s", id)
	}
}

func (f *fixture) onlyPodIDs(t *testing.T) []string {
	t.Helper()
	recs, err := f.store.ListPods()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestCreateOrderSnapshotAndDelete(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	fe.on("add beta", func(c call, _ context.Context) ([]byte, error) {
		return okResult(c, `,"dns":{"nameservers":["10.203.0.1"],"search":["pods.test"],"domain":"test","options":["ndots:2"]}`), nil
	})
	ctx := context.Background()
	p, err := f.m.Create(ctx, CreateRequest{Name: "web", Networks: []string{"gamma", "beta:IP=10.203.1.9;K=V", "alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fe.seen(), ","), "add gamma,add beta,add alpha"; got != want {
		t.Fatalf("calls = %s, want %s", got, want)
	}
	if !netnsfile.IsMounted(p.Netns) || p.Netns != filepath.Join(f.netns, p.ID) {
		t.Fatalf("netns %s is not a mounted namespace", p.Netns)
	}
	// gamma has no template: kurmad passes the first free ethN. beta and
	// alpha render eth{{num}} with num = networks attached before.
	wantArgs := map[string][]string{
		"add gamma": {p.Netns, p.ID, "eth0"},
		"add beta":  {p.Netns, p.ID, "eth1"},
		"add alpha": {p.Netns, p.ID, "eth2"},
	}
	for k, want := range wantArgs {
		if got := fe.callsFor(k)[0].Args; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s args = %v, want %v", k, got, want)
		}
	}
	beta := fe.callsFor("add beta")[0].Stdin
	if !strings.Contains(beta, `"IP":"10.203.1.9"`) || strings.Contains(beta, "containerInterface") || strings.Contains(beta, `"image"`) {
		t.Errorf("beta stdin = %s", beta)
	}
	if len(p.Attachments) != 3 || p.Name != "web" || p.Phase != state.PhaseReady {
		t.Fatalf("pod = %+v", p)
	}
	wantIf := []string{"eth0", "eth1", "eth2"}
	for i, a := range p.Attachments {
		if res := resultOf(t, a); a.Interface != wantIf[i] || a.Phase != state.AttachDone || res == nil || res.CNIVersion != "1.1.0" || a.Image != "sha512-"+a.Network {
			t.Errorf("attachment %d = %+v", i, a)
		}
	}
	rc, err := os.ReadFile(f.m.ResolvConfPath(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	if want := "domain test\nsearch pods.test\nnameserver 10.203.0.1\noptions ndots:2\n"; string(rc) != want {
		t.Errorf("resolv.conf = %q, want %q", rc, want)
	}
	if got, err := f.m.Get(p.ID); err != nil || len(got.Attachments) != 3 {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if l := f.m.List(); len(l) != 1 || l[0].ID != p.ID {
		t.Errorf("List = %+v", l)
	}

	// Remove beta from the config and change alpha: del must use the snapshot.
	f.m = f.newManager(t, fe, parseConfig(t, `{"pod_networks": [
		{"name": "alpha", "image": "file:///x.aci", "default": true, "type": "changed"}]}`))
	fe.calls = nil
	if err := f.m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fe.seen(), ","), "del alpha,del beta,del gamma"; got != want {
		t.Fatalf("calls = %s, want %s", got, want)
	}
	if d := fe.callsFor("del beta")[0]; d.Stdin != beta || strings.Join(d.Args, " ") != p.Netns+" "+p.ID+" eth1" {
		t.Errorf("del beta = %+v, want snapshot stdin %s", d, beta)
	}
	if d := fe.callsFor("del gamma")[0]; strings.Join(d.Args, " ") != p.Netns+" "+p.ID+" eth0" {
		t.Errorf("del gamma args = %v: want the interface add got", d.Args)
	}
	if !strings.Contains(fe.callsFor("del alpha")[0].Stdin, `"fake"`) {
		t.Errorf("del alpha used today's config: %s", fe.callsFor("del alpha")[0].Stdin)
	}
	f.assertGone(t, p.ID)
	if err := f.m.Delete(ctx, p.ID); !errorsIs(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
}

// TestAddsHeldUntilSynced: every add comes held until its intent's sync
// (so a plugin host starts its processes while the journal syncs), and
// the intent it was held for is in the journal when it runs; a del,
// whose attachment is journaled long since, is not held.
func TestAddsHeldUntilSynced(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	var intents []string
	fe.on("add beta", func(c call, _ context.Context) ([]byte, error) {
		p, err := f.store.GetPod(c.Args[1])
		if err != nil {
			return nil, err
		}
		for _, a := range p.Attachments {
			intents = append(intents, a.Network+" "+string(a.Phase))
		}
		return okResult(c, ""), nil
	})
	p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.Delete(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
	fe.mu.Lock()
	calls := slices.Clone(fe.calls)
	fe.mu.Unlock()
	for _, c := range calls {
		if want := c.Path == netplugin.AddPath; c.Held != want {
			t.Errorf("%s: held %v, want %v", c, c.Held, want)
		}
	}
	if got := strings.Join(intents, ","); got != "alpha "+string(state.AttachDone)+",beta "+string(state.AttachIntent) {
		t.Errorf("the journal as beta's add ran: %s, want alpha done and beta's intent", got)
	}
}

func TestCreateDefaultsAndHostResolvConf(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	p, err := f.m.Create(context.Background(), CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fe.seen(), ","), "add alpha,add gamma"; got != want {
		t.Fatalf("calls = %s, want defaults in config order %s", got, want)
	}
	rc, _ := os.ReadFile(f.m.ResolvConfPath(p.ID))
	if string(rc) != "nameserver 192.0.2.53\n" {
		t.Errorf("resolv.conf = %q, want the host's", rc)
	}
	if err := f.m.Delete(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
	f.assertGone(t, p.ID)
}

func TestCreateBadRequests(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	tests := []struct {
		name       string
		networks   []string
		interfaces map[string]string
		want       error
		msg        string
	}{
		{"unknown", []string{"alpha", "nope"}, nil, netplugin.ErrUnknownNetwork, `"nope" (known networks: alpha, beta, gamma)`},
		{"duplicate", []string{"alpha", "beta", "alpha:IP=1.2.3.4"}, nil, ErrBadRequest, `"alpha" is requested twice`},
		{"bad ref", []string{"alpha:"}, nil, ErrBadRequest, "no arguments"},
		{"bad name", []string{"-alpha"}, nil, ErrBadRequest, "-alpha"},
		{"names are exact", []string{"Alpha"}, nil, netplugin.ErrUnknownNetwork, `"Alpha" (known networks: alpha, beta, gamma)`},
		// An interface name the request gives is the request's fault,
		// refused before anything is made.
		{"empty interface", []string{"alpha"}, map[string]string{"alpha": ""}, ErrBadRequest, `network "alpha": the name is empty`},
		{"bad interface", []string{"alpha"}, map[string]string{"alpha": "a/b"}, ErrBadRequest, `network "alpha": "a/b" contains '/'`},
		{"long interface", []string{"alpha"}, map[string]string{"alpha": "abcdefghijklmnop"}, ErrBadRequest, "at most 15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.m.Create(context.Background(), CreateRequest{Networks: tt.networks, Interfaces: tt.interfaces})
			if !errorsIs(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Create = %v, want %v mentioning %s", err, tt.want, tt.msg)
			}
		})
	}
	if n := len(fe.seen()); n != 0 {
		t.Errorf("%d plugin calls for bad requests", n)
	}
	if ids := f.onlyPodIDs(t); len(ids) != 0 {
		t.Errorf("journal holds %v", ids)
	}
	if e, _ := os.ReadDir(f.netns); len(e) != 0 {
		t.Errorf("netns dir holds %d entries", len(e))
	}
	noDefaults := f.newManager(t, fe, parseConfig(t, `{"pod_networks": [{"name": "x", "image": "file:///x.aci"}]}`))
	if _, err := noDefaults.Create(context.Background(), CreateRequest{}); !errorsIs(err, ErrBadRequest) {
		t.Errorf("Create with no defaults = %v", err)
	}
}

var errPluginBoom = fmt.Errorf("boom")

func TestRollback(t *testing.T) {
	tests := []struct {
		name      string
		rule      func(c call, ctx context.Context) ([]byte, error)
		ctxCancel bool
		wantIs    error
		wantMsg   string
	}{
		{"plugin error", func(call, context.Context) ([]byte, error) {
			return nil, &netplugin.NetworkError{Network: "beta", Op: netplugin.AddPath, Err: &netplugin.ExecError{ExitCode: 1,
				CNIError: &types.Error{Code: 7, Msg: "no bridge"}, Stderr: "bridge: failed"}}
		}, false, netplugin.ErrPluginFailed, "no bridge"},
		{"plugin error without network name", func(call, context.Context) ([]byte, error) {
			return nil, fmt.Errorf("exited with code 1: CNI error 7: no bridge: %w", errPluginBoom)
		}, false, errPluginBoom, "no bridge"},
		{"network unavailable", func(call, context.Context) ([]byte, error) {
			return nil, &netplugin.NetworkError{Network: "beta", Err: fmt.Errorf("image fetch failed: %w", netplugin.ErrUnavailable)}
		}, false, netplugin.ErrUnavailable, "image fetch failed"},
		{"unparsable result", func(call, context.Context) ([]byte, error) {
			return []byte("Hello I am a result"), nil
		}, false, nil, "not JSON"},
		{"CNI error object on stdout", func(call, context.Context) ([]byte, error) {
			return []byte(`{"code":11,"msg":"try again later"}`), nil
		}, false, nil, "try again later"},
		{"timeout with caller cancelled", func(_ call, ctx context.Context) ([]byte, error) {
			<-ctx.Done()
			return nil, &netplugin.NetworkError{Network: "beta", Op: netplugin.AddPath, Err: fmt.Errorf("timed out after 1s: %w", netplugin.ErrTimeout)}
		}, true, netplugin.ErrTimeout, "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := newFakeExec()
			f := newFixture(t, fe)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rule := tt.rule
			if tt.ctxCancel {
				// The caller gives up while beta's add runs.
				rule = func(c call, ctx context.Context) ([]byte, error) {
					cancel()
					return tt.rule(c, ctx)
				}
			}
			fe.on("add beta", rule)
			_, err := f.m.Create(ctx, CreateRequest{Networks: []string{"gamma", "alpha", "beta"}})
			if err == nil {
				t.Fatal("Create succeeded")
			}
			if !strings.Contains(err.Error(), `network "beta"`) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not name beta and carry %q", err, tt.wantMsg)
			}
			if strings.Count(err.Error(), `network "beta"`) != 1 {
				t.Errorf("error %q names the network more than once", err)
			}
			if ne := (*netplugin.NetworkError)(nil); !errors.As(err, &ne) || ne.Network != "beta" {
				t.Errorf("error %v is not a *netplugin.NetworkError of beta", err)
			}
			if tt.wantIs != nil && !errorsIs(err, tt.wantIs) {
				t.Errorf("error %v does not wrap %v", err, tt.wantIs)
			}
			if got, want := strings.Join(fe.seen(), ","), "add gamma,add alpha,add beta,del beta,del alpha,del gamma"; got != want {
				t.Fatalf("calls = %s, want %s", got, want)
			}
			for _, d := range fe.callsFor("del beta") {
				if d.CtxErr != nil {
					t.Errorf("rollback del ran with a dead context: %v", d.CtxErr)
				}
				if d.Stdin != fe.callsFor("add beta")[0].Stdin || strings.Join(d.Args, " ") != strings.Join(fe.callsFor("add beta")[0].Args, " ") {
					t.Errorf("del beta %+v differs from its add", d)
				}
			}
			if ids := f.onlyPodIDs(t); len(ids) != 0 {
				t.Errorf("journal holds %v after rollback", ids)
			}
			if e, _ := os.ReadDir(f.netns); len(e) != 0 {
				t.Errorf("netns dir holds %d entries after rollback", len(e))
			}
			f.m.Wait() // the dir goes after the answer
			if e, _ := os.ReadDir(f.pods); len(e) != 0 {
				t.Errorf("pods dir holds %d entries after rollback", len(e))
			}
		})
	}
}

func TestRollbackDelFailureKeepsPod(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	fe.on("add beta", func(call, context.Context) ([]byte, error) { return nil, errPluginBoom })
	fe.on("del alpha", func(call, context.Context) ([]byte, error) { return nil, fmt.Errorf("ipam store locked") })
	_, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err == nil || !strings.Contains(err.Error(), "rollback incomplete") || !strings.Contains(err.Error(), "ipam store locked") {
		t.Fatalf("Create = %v", err)
	}
	ids := f.onlyPodIDs(t)
	if len(ids) != 1 {
		t.Fatalf("journal = %v, want the failed pod kept", ids)
	}
	p, _ := f.m.Get(ids[0])
	if p.Phase != state.PhaseFailed || !strings.Contains(p.Error, "ipam store locked") {
		t.Errorf("kept pod = %+v", p)
	}
	fe.on("del alpha", nil)
	if err := f.m.Delete(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	f.assertGone(t, ids[0])
}

func TestDeleteAttemptsEveryDelAndRetries(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta", "gamma"}})
	if err != nil {
		t.Fatal(err)
	}
	fe.on("del beta", func(call, context.Context) ([]byte, error) { return nil, fmt.Errorf("plugin exploded") })
	fe.calls = nil
	err = f.m.Delete(context.Background(), p.ID)
	if err == nil || !strings.Contains(err.Error(), "plugin exploded") || !strings.Contains(err.Error(), `network "beta"`) {
		t.Fatalf("Delete = %v", err)
	}
	if got, want := strings.Join(fe.seen(), ","), "del gamma,del beta,del alpha"; got != want {
		t.Fatalf("calls = %s, want every del attempted: %s", got, want)
	}
	if !netnsfile.IsMounted(p.Netns) {
		t.Error("netns removed while a del has not succeeded: its retry would run without it")
	}
	kept, err := f.m.Get(p.ID)
	if err != nil || kept.Phase != state.PhaseFailed || !strings.Contains(kept.Error, "plugin exploded") {
		t.Fatalf("kept = %+v, %v", kept, err)
	}
	if l := f.m.List(); len(l) != 1 {
		t.Errorf("List = %v, want the failed pod listed", l)
	}
	if n := f.m.Pending(); n != 1 {
		t.Errorf("%d pods wait for a retry, want 1", n)
	}
	fe.on("del beta", nil)
	fe.calls = nil
	if err := f.m.Delete(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fe.seen(), ","), "del beta"; got != want {
		t.Errorf("retry calls = %s, want only the del that had not succeeded: %s", got, want)
	}
	f.assertGone(t, p.ID)
	if n := f.m.Pending(); n != 0 {
		t.Errorf("%d pods wait for a retry after the delete finished", n)
	}
}

// TestPodsRunInParallel holds one pod's add until another pod's add has
// started: it would deadlock if a lock were held across Exec.
func TestPodsRunInParallel(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	started := make(chan struct{})
	var once sync.Once
	fe.on("add beta", func(c call, ctx context.Context) ([]byte, error) {
		once.Do(func() { close(started) })
		return okResult(c, ""), nil
	})
	fe.on("add alpha", func(c call, ctx context.Context) ([]byte, error) {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			return nil, fmt.Errorf("the other pod never ran: a lock is held across Exec")
		}
		return okResult(c, ""), nil
	})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	ids := make([]string, 2)
	for i, nets := range [][]string{{"alpha"}, {"beta"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := f.m.Create(context.Background(), CreateRequest{Networks: nets})
			errs[i] = err
			if p != nil {
				ids[i] = p.ID
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	for _, id := range ids {
		if err := f.m.Delete(context.Background(), id); err != nil {
			t.Error(err)
		}
	}
}

func TestReconcile(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	ready, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	vanished, err := f.m.Create(ctx, CreateRequest{Networks: []string{"beta"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := netnsfile.Remove(vanished.Netns); err != nil {
		t.Fatal(err)
	}
	cfgA := []byte(`{"cniVersion":"1.0.0","name":"alpha","type":"fake","snapshot":true}`)
	// A half-made pod: netns made, alpha done, gamma's add in flight, its
	// intent as a kurmad journaled it before every attachment got a name
	// (no interface): its del gets the one link no attachment claims.
	half := &state.Pod{ID: "11111111-1111-4111-8111-111111111111", Created: time.Now(), Phase: state.PhaseCreating,
		Networks: []string{"alpha", "gamma"}}
	half.Netns = filepath.Join(f.netns, half.ID)
	half.Attachments = []state.Attachment{
		{Network: "alpha", Interface: "eth0", Config: cfgA, Phase: state.AttachDone, Result: json.RawMessage(`{"cniVersion":"1.1.0"}`)},
		{Network: "gamma", Config: []byte(`{"name":"gamma"}`), Phase: state.AttachIntent},
	}
	// A pod whose delete was cut short.
	deleting := &state.Pod{ID: "22222222-2222-4222-8222-222222222222", Created: time.Now(), Phase: state.PhaseDeleting,
		Attachments: []state.Attachment{{Network: "beta", Interface: "eth0", Config: []byte(`{"name":"beta"}`), Phase: state.AttachDone}}}
	deleting.Netns = filepath.Join(f.netns, deleting.ID)
	for _, p := range []*state.Pod{half, deleting} {
		if err := f.store.PutPod(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := netnsfile.Create(half.Netns); err != nil {
		t.Fatal(err)
	}
	testutil.AddLinksIn(t, half.Netns, "eth1")
	orphan := filepath.Join(f.netns, "33333333-3333-4333-8333-333333333333")
	if err := netnsfile.Create(orphan); err != nil {
		t.Fatal(err)
	}
	notOurs := filepath.Join(f.netns, "not-a-pod")
	if err := os.WriteFile(notOurs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	orphanDir := filepath.Join(f.pods, "44444444-4444-4444-8444-444444444444")
	if err := os.MkdirAll(orphanDir, 0o755); err != nil {
		t.Fatal(err)
	}

	// A new kurmad: same journal and dirs, a fresh Manager and a config
	// that no longer has gamma.
	fe.calls = nil
	cfg2 := parseConfig(t, `{"pod_networks": [{"name": "alpha", "image": "file:///x.aci", "type": "other"}]}`)
	m2, err := New(Options{Networks: newFakeNetworks(t, cfg2, f.store), Exec: fe, Store: f.store, NetnsDir: f.netns, PodsDir: f.pods,
		HostResolvConf: f.hostDNS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Wait)
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	m2.Wait() // the pod dirs of its teardowns go after them
	seen := strings.Join(fe.seen(), ",")
	for _, want := range []string{"del beta", "del gamma,del alpha"} {
		if !strings.Contains(seen, want) {
			t.Errorf("calls %s lack %s", seen, want)
		}
	}
	if strings.Contains(seen, "add") {
		t.Errorf("reconcile ran an add: %s", seen)
	}
	if c := fe.callsFor("del alpha"); len(c) != 1 || c[0].Stdin != string(cfgA) {
		t.Errorf("del alpha = %+v, want one call with the snapshot", c)
	}
	if c := fe.callsFor("del gamma"); len(c) != 1 || len(c[0].Args) != 3 || c[0].Args[2] != "eth1" {
		t.Errorf("del gamma = %+v, want one call with eth1, the link it left", c)
	}
	for _, id := range []string{vanished.ID, half.ID, deleting.ID} {
		f.assertGone(t, id)
	}
	if _, err := os.Lstat(orphan); !os.IsNotExist(err) {
		t.Error("orphan netns not removed")
	}
	if _, err := os.Lstat(orphanDir); !os.IsNotExist(err) {
		t.Error("orphan pod dir not removed")
	}
	if _, err := os.Lstat(notOurs); err != nil {
		t.Error("a file not named like a pod was removed")
	}
	got := m2.List()
	if len(got) != 1 || got[0].ID != ready.ID || !netnsfile.IsMounted(ready.Netns) {
		t.Fatalf("List after reconcile = %+v, want only the adopted pod", got)
	}
	if err := m2.Delete(ctx, ready.ID); err != nil {
		t.Fatal(err)
	}
	m2.Wait()
	f.assertGone(t, ready.ID)
}

// TestReconcileKeepsWhatCannotBeDeleted: a del that cannot run at boot (its
// network is unavailable) is not run: the pod stays deleting and listed,
// with its netns; Reconcile does not fail the boot, and a later Delete
// finishes the job.
func TestReconcileKeepsWhatCannotBeDeleted(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	p, err := f.m.Create(ctx, CreateRequest{Networks: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.SetPhase(p.ID, state.PhaseDeleting, ""); err != nil {
		t.Fatal(err)
	}
	fe.on("del beta", func(call, context.Context) ([]byte, error) {
		return nil, &netplugin.NetworkError{Network: "beta", Err: fmt.Errorf("not in the config: %w", netplugin.ErrUnavailable)}
	})
	if err := f.m.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile = %v, want nil (a failed teardown is kept, not fatal)", err)
	}
	l := f.m.List()
	if len(l) != 1 || l[0].Phase != state.PhaseDeleting || !strings.Contains(l[0].Error, "unavailable") || !netnsfile.IsMounted(p.Netns) {
		t.Fatalf("List = %+v (netns mounted: %v), want the pod deleting, waiting, with its netns", l, netnsfile.IsMounted(p.Netns))
	}
	fe.on("del beta", nil)
	if err := f.m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	f.assertGone(t, p.ID)
}

// TestConcurrentDeletes: two Deletes of one pod run one after the other;
// each del runs once, one Delete succeeds and the other finds nothing.
func TestConcurrentDeletes(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	// The first Delete is held in its del beta until the second waits for
	// the pod's lock behind it.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fe.on("del beta", func(call, context.Context) ([]byte, error) {
		once.Do(func() { close(entered) })
		<-release
		return nil, nil
	})
	errs := make(chan error, 2)
	go func() { errs <- f.m.Delete(context.Background(), p.ID) }()
	select {
	case <-entered:
	case err := <-errs:
		t.Fatalf("Delete returned %v without running del beta", err)
	}
	go func() { errs <- f.m.Delete(context.Background(), p.ID) }()
	testutil.WaitFor(t, 5*time.Second, "the second Delete to wait for the pod's lock", func() error {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		if l := f.m.locks[p.ID]; l == nil || l.refs < 2 {
			return fmt.Errorf("lock of pod %s: %+v", p.ID, l)
		}
		return nil
	})
	close(release)
	var ok, notFound int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errorsIs(err, ErrNotFound):
			notFound++
		default:
			t.Errorf("Delete = %v", err)
		}
	}
	if ok != 1 || notFound != 1 {
		t.Errorf("%d succeeded, %d not found; want 1 and 1", ok, notFound)
	}
	if n := len(fe.callsFor("del beta")); n != 1 {
		t.Errorf("del beta ran %d times", n)
	}
	f.assertGone(t, p.ID)
}

// TestRollbackFailedNetworkDelIsBestEffort: the network whose add failed
// often fails its del for the same reason (a bad config); that must not
// keep the pod, or it could never be deleted.
func TestRollbackFailedNetworkDelIsBestEffort(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	fe.on("add beta", func(call, context.Context) ([]byte, error) { return nil, fmt.Errorf("invalid CIDR") })
	fe.on("del beta", func(call, context.Context) ([]byte, error) { return nil, fmt.Errorf("invalid CIDR") })
	_, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err == nil || strings.Contains(err.Error(), "rollback incomplete") {
		t.Fatalf("Create = %v", err)
	}
	if got, want := strings.Join(fe.seen(), ","), "add alpha,add beta,del beta,del alpha"; got != want {
		t.Errorf("calls = %s, want %s", got, want)
	}
	if ids := f.onlyPodIDs(t); len(ids) != 0 {
		t.Errorf("journal holds %v", ids)
	}
}

// TestPolicyNetworkRefused: a pod never attaches to the policy network:
// a create naming it is refused before anything is made, saying why; its
// gc is refused and Collect does not run it; "known networks" do not
// offer it.
func TestPolicyNetworkRefused(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	m := f.newManager(t, fe, parseConfig(t, `{"pod_networks": [
		{"name": "alpha", "image": "file:///x.aci", "default": true, "network_policy": true, "type": "fake"},
		{"name": "netpol", "image": "file:///n.aci", "role": "policy"}]}`))
	const msg = `network "netpol" enforces policy (role "policy"); pods do not attach to it`
	for _, nets := range [][]string{{"netpol"}, {"alpha", "netpol:IP=10.1.0.9"}} {
		if _, err := m.Create(context.Background(), CreateRequest{Networks: nets}); !errorsIs(err, ErrBadRequest) || !strings.Contains(err.Error(), msg) {
			t.Errorf("Create %v = %v, want ErrBadRequest saying %s", nets, err, msg)
		}
	}
	if _, err := m.Create(context.Background(), CreateRequest{Networks: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "(known networks: alpha)") {
		t.Errorf("Create of an unknown network = %v, want the known networks without netpol", err)
	}
	if err := m.GC(context.Background(), "netpol"); !errorsIs(err, ErrBadRequest) || !strings.Contains(err.Error(), msg) {
		t.Errorf("GC netpol = %v, want ErrBadRequest", err)
	}
	m.Collect(context.Background())
	for _, c := range fe.seen() {
		if strings.HasSuffix(c, " netpol") {
			t.Errorf("kurmad called %q on the policy network", c)
		}
	}
	if got := strings.Join(fe.seen(), ","); got != "gc alpha" {
		t.Errorf("calls = %s, want only alpha's gc", got)
	}
	if ids := f.onlyPodIDs(t); len(ids) != 0 {
		t.Errorf("journal holds %v after refused creates", ids)
	}
}
