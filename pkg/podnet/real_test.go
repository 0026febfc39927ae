package podnet

// Real tests: a real netns, the real cni-wrapper (as add/del, argv0
// dispatch) and the real CNI bridge and host-local plugins, run on the host
// by hostExec, the smallest Execer that does what the plugin host does.
// Kernel names: bridge kt-pnet0, subnet 10.203.0.0/16 (reserved for podnet).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

const testBridge = "kt-pnet0"

// tools are the built wrapper (dir/add, dir/del) and CNI plugins (cniPath).
type tools struct{ dir, cniPath string }

var (
	toolsOnce sync.Once
	toolsVal  tools
	toolsErr  error
	toolsDir  string
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperMain()
		return
	}
	if dir := os.Getenv(plantHelperEnv); dir != "" {
		plantHelperMain(dir)
		return
	}
	code := m.Run()
	testutil.RemoveBuilds()
	if toolsDir != "" {
		os.RemoveAll(toolsDir)
	}
	os.Exit(code)
}

func buildTools(t *testing.T) tools {
	t.Helper()
	bin := testutil.Build(t, testutil.BuildOptions{}, "./plugins/cni-wrapper",
		"github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/main/loopback",
		"./internal/testplugins/cnitest")
	toolsOnce.Do(func() {
		// The wrapper picks its verb from its name, as in the image.
		if toolsDir, toolsErr = os.MkdirTemp("", "kurma-podnet-tools-"); toolsErr != nil {
			return
		}
		for _, verb := range []string{"add", "del", "gc"} {
			if toolsErr = os.Link(filepath.Join(bin, "cni-wrapper"), filepath.Join(toolsDir, verb)); toolsErr != nil {
				return
			}
		}
		toolsVal = tools{dir: toolsDir, cniPath: bin}
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return toolsVal
}

// hostExec runs the wrapper on the host the way the plugin host runs it
// in a network's container: path's base name picks the verb, the config on
// stdin, CNI_PATH and the libcni cache pointed at test dirs.
type hostExec struct {
	tools    tools
	cacheDir string
}

func (h *hostExec) Exec(ctx context.Context, c netplugin.Call) ([]byte, []byte, error) {
	// It cannot hold a call: it waits for the hold before the call starts.
	stdin, err := c.Stdin()
	if err != nil {
		return nil, nil, err
	}
	network, path := c.Network, c.Path
	cmd := exec.CommandContext(ctx, filepath.Join(h.tools.dir, filepath.Base(path)), c.Args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CNI_PATH=" + h.tools.cniPath, "KURMA_CNI_CACHE_DIR=" + h.cacheDir}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Like the plugin host: the whole process group goes on timeout,
	// a child still holding stdout cannot stall the call, and whatever
	// the call leaves running goes when it ends (the agent kills its
	// call's cgroup).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		return stdout.Bytes(), stderr.Bytes(), fmt.Errorf("network %q: %s timed out: %w", network, path, netplugin.ErrTimeout)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		var cerr types.Error
		if json.Unmarshal(stdout.Bytes(), &cerr) == nil && cerr.Msg != "" {
			msg = fmt.Sprintf("CNI error %d: %s", cerr.Code, cerr.Error())
		}
		return stdout.Bytes(), stderr.Bytes(), fmt.Errorf("network %q: %s failed: %w: %s", network, path, err, msg)
	}
	return stdout.Bytes(), stderr.Bytes(), nil
}

type realEnv struct {
	dir, netns, pods, ipam, cache, db string
	cnitest                           string // cnitest's state dir
	exec                              *hostExec
	managers                          []*Manager // every one manager made
}

func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	testutil.RequireRoot(t)
	tl := buildTools(t)
	dir := t.TempDir()
	e := &realEnv{dir: dir, netns: filepath.Join(dir, "netns"), pods: filepath.Join(dir, "pods"),
		ipam: filepath.Join(dir, "ipam"), cache: filepath.Join(dir, "cnicache"), db: filepath.Join(dir, "kurmad.db"),
		cnitest: filepath.Join(dir, "cnitest")}
	if err := os.Mkdir(e.cnitest, 0o700); err != nil {
		t.Fatal(err)
	}
	e.exec = &hostExec{tools: tl, cacheDir: e.cache}
	t.Cleanup(func() {
		// A plugin's process still running names this test's dir (cnitest's
		// hanging child names its pod's netns file): a leak of this test,
		// and only of this one. None outlives it.
		if left := e.processes(); len(left) > 0 {
			t.Errorf("processes left behind: %s", strings.Join(left, "; "))
		}
		if err := testutil.KillProcessesWhere(e.owns); err != nil {
			t.Error(err)
		}
		// Whatever a failing test leaves: netns mounts, the bridge.
		entries, _ := os.ReadDir(e.netns)
		for _, en := range entries {
			_ = netnsfile.Remove(filepath.Join(e.netns, en.Name()))
		}
		if l, err := netlink.LinkByName(testBridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	return e
}

// owns tells whether a process (its command line) is this test's.
func (e *realEnv) owns(cmdline, _ string) bool { return strings.Contains(cmdline, e.dir) }

// processes lists the live processes of this test.
func (e *realEnv) processes() []string { return testutil.ProcessesWhere(e.owns) }

// config: pnet1 (eth{{num}}, 10.203.1.x), pnet2 (no template: the plugin
// picks, 10.203.2.x, DNS in its result), broken (host-local with a bad
// subnet: the plugin fails). No isGateway: the pods talk over L2, and the
// bridge plugin then leaves the host's ip_forward alone.
func (e *realEnv) config(t *testing.T, withPnet2 bool) *netconfig.Config {
	t.Helper()
	cfg, err := netconfig.Parse(e.configJSON(withPnet2), e.dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (e *realEnv) configJSON(withPnet2 bool) []byte {
	ipam := func(n int) string {
		return fmt.Sprintf(`{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.203.0.0/16","rangeStart":"10.203.%d.2","rangeEnd":"10.203.%d.254","gateway":"10.203.0.1"}]]}`,
			e.ipam, n, n)
	}
	nets := []string{
		`{"name":"pnet1","image":"file:///x.aci","default":true,"containerInterface":"eth{{num}}","type":"bridge","bridge":"kt-pnet0","ipam":` + ipam(1) + `}`,
	}
	if withPnet2 {
		nets = append(nets, `{"name":"pnet2","image":"file:///x.aci","cniVersion":"0.4.0","type":"bridge","bridge":"kt-pnet0","dns":{"nameservers":["10.203.0.1"],"search":["pnet.test"]},"ipam":`+ipam(2)+`}`)
	}
	// chain, chainhang: bridge then cnitest failing or hanging: the bridge's
	// veth and IP exist when add fails.
	chain := func(name, behavior string) string {
		return `{"name":"` + name + `","image":"file:///x.aci","cniVersion":"1.0.0","plugins":[{"type":"bridge","bridge":"kt-pnet0","ipam":` +
			ipam(3) + `},{"type":"cnitest","stateDir":"` + e.cnitest + `","behavior":"` + behavior + `"}]}`
	}
	nets = append(nets, chain("chain", "fail"), chain("chainhang", "hang"))
	// capnet declares the ips capability: a pod's runtimeConfig picks its IP.
	nets = append(nets, `{"name":"capnet","image":"file:///x.aci","type":"bridge","bridge":"kt-pnet0","capabilities":{"ips":true},"ipam":`+ipam(4)+`}`)
	// lonet is CNI's loopback: it makes no interface.
	nets = append(nets, `{"name":"lonet","image":"file:///x.aci","cniVersion":"1.0.0","type":"loopback"}`)
	nets = append(nets, `{"name":"broken","image":"file:///x.aci","type":"bridge","bridge":"kt-pnet0","ipam":{"type":"host-local","dataDir":"`+e.ipam+`","subnet":"10.203.0.0/99"}}`)
	return []byte(`{"plugin_timeout":"20s","pod_networks":[` + strings.Join(nets, ",") + `]}`)
}

func (e *realEnv) manager(t *testing.T, cfg *netconfig.Config, store *state.Store) *Manager {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	log.SetOutput(testutil.LogWriter(t))
	m, err := New(Options{Networks: newFakeNetworks(t, cfg, store), Exec: e.exec, Store: store, NetnsDir: e.netns, PodsDir: e.pods,
		HostResolvConf: "/etc/resolv.conf", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e.managers = append(e.managers, m)
	t.Cleanup(m.Wait)
	return m
}

func (e *realEnv) open(t *testing.T) *state.Store {
	t.Helper()
	s, err := state.Open(e.db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// podOnBoth opens the journal, makes a Manager on the config with pnet2,
// and creates a pod on pnet1 and pnet2 with it.
func (e *realEnv) podOnBoth(t *testing.T) (*state.Store, *state.Pod) {
	t.Helper()
	store := e.open(t)
	m := e.manager(t, e.config(t, true), store)
	p, err := m.Create(context.Background(), CreateRequest{Networks: []string{"pnet1", "pnet2"}})
	if err != nil {
		t.Fatal(err)
	}
	return store, p
}

// reservedIPs lists host-local's reservation files (named by IP).
func (e *realEnv) reservedIPs(t *testing.T) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(e.ipam, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && net.ParseIP(d.Name()) != nil {
			out = append(out, strings.TrimPrefix(p, e.ipam+"/"))
		}
		return nil
	})
	return out
}

// bridgePorts lists the veths enslaved to the test bridge.
func bridgePorts(t *testing.T) []string {
	t.Helper()
	br, err := netlink.LinkByName(testBridge)
	if err != nil {
		return nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// deleteAll deletes pods with m, failing at the first error, then asserts
// nothing of them is left.
func (e *realEnv) deleteAll(t *testing.T, m *Manager, store *state.Store, pods ...*state.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := m.Delete(context.Background(), p.ID); err != nil {
			t.Fatal(err)
		}
	}
	e.assertClean(t, store)
}

// assertClean checks nothing of any pod is left on the host or journal.
func (e *realEnv) assertClean(t *testing.T, store *state.Store) {
	t.Helper()
	for _, m := range e.managers {
		m.Wait() // a delete removes the pod's dir after its answer
	}
	if ips := e.reservedIPs(t); len(ips) != 0 {
		t.Errorf("host-local reservations left: %v", ips)
	}
	if ports := bridgePorts(t); len(ports) != 0 {
		t.Errorf("veths left on %s: %v", testBridge, ports)
	}
	for _, d := range []string{e.netns, e.pods} {
		if en, _ := os.ReadDir(d); len(en) != 0 {
			t.Errorf("%s not empty: %d entries", d, len(en))
		}
	}
	if pods, err := store.ListPods(); err != nil || len(pods) != 0 {
		t.Errorf("journal holds %d pods (%v)", len(pods), err)
	}
	// A killed process takes a moment to go.
	if err := testutil.Poll(context.Background(), 3*time.Second, "the plugins' processes to end", func() error {
		if left := e.processes(); len(left) > 0 {
			return fmt.Errorf("left: %s", strings.Join(left, "; "))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// assertOrphanNetns checks what a create killed before its intent's
// commit leaves: one netns file, mounted, and one pod dir, that no journal
// record names.
func (e *realEnv) assertOrphanNetns(t *testing.T, store *state.Store) {
	t.Helper()
	if pods, err := store.ListPods(); err != nil || len(pods) != 0 {
		t.Fatalf("journal holds %d pods (%v); want none: the intent was not committed", len(pods), err)
	}
	en, err := os.ReadDir(e.netns)
	if err != nil || len(en) != 1 {
		t.Fatalf("netns dir: %d entries (%v); want the orphan alone", len(en), err)
	}
	if p := filepath.Join(e.netns, en[0].Name()); !netnsfile.IsMounted(p) {
		t.Fatalf("orphan %s is not a mounted netns", p)
	}
	if pd, err := os.ReadDir(e.pods); err != nil || len(pd) != 1 {
		t.Fatalf("pods dir: %d entries (%v); want the orphan's alone", len(pd), err)
	}
}

func ipOf(t *testing.T, p *state.Pod, network string) string {
	t.Helper()
	for _, a := range p.Attachments {
		if res := resultOf(t, a); a.Network == network && res != nil && len(res.IPs) > 0 {
			return res.IPs[0].Address.IP.String()
		}
	}
	t.Fatalf("pod %s has no IP on %s: %+v", p.ID, network, p.Attachments)
	return ""
}

func TestRealTwoPodsPingAndDelete(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, true), store)
	ctx := context.Background()

	var pods [2]*state.Pod
	var errs [2]error
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pods[i], errs[i] = m.Create(ctx, CreateRequest{Name: fmt.Sprintf("ktp-%d", i), Networks: []string{"pnet1", "pnet2"}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	for _, p := range pods {
		if len(p.Attachments) != 2 || p.Attachments[0].Interface != "eth0" || p.Attachments[1].Interface == "" {
			t.Fatalf("pod %s attachments: %+v", p.ID, p.Attachments)
		}
		for _, a := range p.Attachments {
			if v := resultOf(t, a).CNIVersion; v != "1.1.0" {
				t.Errorf("%s result version %s", a.Network, v)
			}
		}
		rc, err := os.ReadFile(m.ResolvConfPath(p.ID))
		if err != nil || !strings.Contains(string(rc), "nameserver 10.203.0.1") || !strings.Contains(string(rc), "search pnet.test") {
			t.Errorf("resolv.conf = %q (%v), want pnet2's DNS", rc, err)
		}
	}
	if n := len(e.reservedIPs(t)); n != 4 {
		t.Errorf("%d IPs reserved, want 4", n)
	}
	// The pods reach each other over the bridge, and lo is up.
	for _, target := range []string{ipOf(t, pods[1], "pnet1"), "127.0.0.1"} {
		out, err := exec.Command("nsenter", "--net="+pods[0].Netns, "ping", "-c", "1", "-W", "3", target).CombinedOutput()
		if err != nil {
			t.Errorf("ping %s from pod 0: %v\n%s", target, err, out)
		}
	}
	e.deleteAll(t, m, store, pods[:]...)
	if err := m.Delete(ctx, pods[0].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
}

func TestRealRollbackOnSecondNetwork(t *testing.T) {
	e := newRealEnv(t)
	store := e.open(t)
	m := e.manager(t, e.config(t, true), store)
	_, err := m.Create(context.Background(), CreateRequest{Networks: []string{"pnet1", "pnet2", "broken"}})
	if err == nil {
		t.Fatal("Create succeeded with a broken network")
	}
	if !strings.Contains(err.Error(), `network "broken"`) || !strings.Contains(err.Error(), "10.203.0.0/99") {
		t.Errorf("error %q does not name the network and carry the plugin's message", err)
	}
	e.assertClean(t, store)
}

func TestRealConfigChangedBetweenAddAndDel(t *testing.T) {
	e := newRealEnv(t)
	store, p := e.podOnBoth(t)
	ctx := context.Background()
	// "Restart" with pnet2 gone from the config: the pod is adopted and its
	// delete still detaches pnet2 with the journaled snapshot.
	m2 := e.manager(t, e.config(t, false), store)
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if l := m2.List(); len(l) != 1 || l[0].ID != p.ID {
		t.Fatalf("adopted = %+v", l)
	}
	if err := m2.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t, store)
}

// helperEnv makes the test binary a one-shot "kurmad" that creates (and
// with KURMA_PODNET_HELPER=create-delete deletes) a pod, so a failpoint can
// kill it for real.
const helperEnv = "KURMA_PODNET_HELPER"

type helperSpec struct {
	Dir, Tools, CNIPath string
	Config              []byte
	Networks            []string
}

func helperMain() {
	var spec helperSpec
	if err := json.Unmarshal([]byte(os.Getenv("KURMA_PODNET_SPEC")), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	store, err := state.Open(filepath.Join(spec.Dir, "kurmad.db"))
	if err != nil {
		fail(err)
	}
	cfg, err := netconfig.Parse(spec.Config, spec.Dir)
	if err != nil {
		fail(err)
	}
	m, err := New(Options{Networks: newFakeNetworks(nil, cfg, store), Store: store, NetnsDir: filepath.Join(spec.Dir, "netns"), PodsDir: filepath.Join(spec.Dir, "pods"),
		Exec: &hostExec{tools: tools{dir: spec.Tools, cniPath: spec.CNIPath}, cacheDir: filepath.Join(spec.Dir, "cnicache")}})
	if err != nil {
		fail(err)
	}
	p, err := m.Create(context.Background(), CreateRequest{Networks: spec.Networks})
	if err != nil {
		fail(err)
	}
	if os.Getenv(helperEnv) == "create-delete" {
		if err := m.Delete(context.Background(), p.ID); err != nil {
			fail(err)
		}
	}
	os.Exit(0)
}

// TestRealCrashPoints kills a real create (or delete) at every failpoint,
// then boots a new Manager on the same journal: after Reconcile the pod is
// either whole (and deletes cleanly) or gone, and nothing leaked.
func TestRealCrashPoints(t *testing.T) {
	requireFailpoints(t)
	tests := []struct {
		failpoint string
		mode      string
	}{
		{"netns-before-intent", "create"},
		{"after-pod-intent", "create"},
		{"after-netns", "create"},
		{"after-attach-intent:pnet1", "create"},
		{"after-attach-intent:pnet2", "create"},
		{"after-add:pnet1", "create"},
		{"after-add:pnet2", "create"},
		{"before-done:pnet2", "create"},
		{"before-ready", "create"},
		{"after-delete-intent", "create-delete"},
		{"after-del:pnet2", "create-delete"},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.failpoint, ":", "_"), func(t *testing.T) {
			e := newRealEnv(t)
			tl := e.exec.tools
			spec, _ := json.Marshal(helperSpec{Dir: e.dir, Tools: tl.dir, CNIPath: tl.cniPath, Config: e.configJSON(true), Networks: []string{"pnet1", "pnet2"}})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+tt.mode, "KURMA_PODNET_SPEC="+string(spec), FailpointEnv+"="+tt.failpoint)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("helper was not killed at %s: %v\n%s", tt.failpoint, err, out)
			}
			if !strings.Contains(string(out), "failpoint "+tt.failpoint) {
				t.Fatalf("helper output lacks the failpoint:\n%s", out)
			}
			store := e.open(t)
			if tt.failpoint == "netns-before-intent" {
				e.assertOrphanNetns(t, store)
			}
			m := e.manager(t, e.config(t, true), store)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if l := m.List(); len(l) != 0 {
				t.Fatalf("pods after reconcile: %+v", l)
			}
			e.assertClean(t, store)
		})
	}
}

// TestRealReconcileVanishedNetns: a ready pod whose netns disappeared (a
// reboot empties /run) is torn down at boot so host-local frees its IPs.
func TestRealReconcileVanishedNetns(t *testing.T) {
	e := newRealEnv(t)
	store, p := e.podOnBoth(t)
	if err := netnsfile.Remove(p.Netns); err != nil {
		t.Fatal(err)
	}
	if n := len(e.reservedIPs(t)); n != 2 {
		t.Fatalf("%d IPs reserved before reconcile, want 2", n)
	}
	m2 := e.manager(t, e.config(t, true), store)
	if err := m2.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t, store)
}

// TestRealRollbackChainLeavesNoIP: a conflist whose second plugin fails
// or hangs (timeout) after bridge made a veth and reserved an IP; the
// rollback must still release the IP.
func TestRealRollbackChainLeavesNoIP(t *testing.T) {
	for _, tt := range []struct{ network, msg string }{
		{"chain", "CNI error"},
		{"chainhang", "timed out"},
	} {
		t.Run(tt.network, func(t *testing.T) {
			e := newRealEnv(t)
			store := e.open(t)
			m := e.manager(t, e.config(t, true), store)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := m.Create(ctx, CreateRequest{Networks: []string{"pnet1", tt.network}})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("network %q", tt.network)) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Create = %v", err)
			}
			if tt.network == "chainhang" {
				if !errors.Is(err, netplugin.ErrTimeout) {
					t.Errorf("error %v does not match netplugin.ErrTimeout", err)
				}
				// Its background child ran, so the check that no process is
				// left (in assertClean) has something to find.
				if _, err := os.Stat(filepath.Join(e.cnitest, "cnitest-hang-child-started")); err != nil {
					t.Errorf("the hanging plugin's child never started: %v", err)
				}
			}
			e.assertClean(t, store)
		})
	}
}
