package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// Kernel objects this package may touch (see notes/contracts.md).
var e2eBridges = []string{"kt-e2e0", "kt-e2e1"}

const buildVersion = "e2e-test"

var (
	buildOnce sync.Once
	buildErr  error
	binDir    string // kurmad, kurmactl, kurma-agent, cnitest, kurma-e2e.aci
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// setup is every test's first call: root or skip/fail, then the binaries and
// the test image, built once per test binary.
func setup(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	buildOnce.Do(func() { buildErr = build(t) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func build(t *testing.T) error {
	dir, err := os.MkdirTemp("", "kte-bin-")
	if err != nil {
		return err
	}
	binDir = dir
	root := testutil.RepoRoot()
	steps := []struct {
		cgo  bool
		args []string
	}{
		{true, []string{"build", "-tags", "containers_image_openpgp", "-ldflags", "-X main.version=" + buildVersion, "-o", dir + "/", "./cmd/kurmad", "./cmd/kurmactl"}},
		// networkpod looks for kurma-agent beside os.Executable().
		{false, []string{"build", "-trimpath", "-o", dir + "/", "./cmd/kurma-agent", "./internal/testplugins/cnitest"}},
	}
	for _, s := range steps {
		cmd := exec.Command("go", s.args...)
		cmd.Dir = root
		cmd.Env = os.Environ()
		if !s.cgo {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(s.args, " "), err, out)
		}
	}
	testutil.DeriveACI(t, testutil.BuiltImage(t, "cni-netplugin.aci"), testImage(), "e2e",
		map[string]string{"/opt/cni/bin/cnitest": filepath.Join(dir, "cnitest")})
	return nil
}

func bin(name string) string { return filepath.Join(binDir, name) }

// testImage is cni-netplugin.aci plus /opt/cni/bin/cnitest, version "e2e".
func testImage() string { return filepath.Join(binDir, "kurma-e2e.aci") }

// env is one test's kurmad: its dirs, config and (at most one) process.
type env struct {
	t                                     *testing.T
	dir, stateDir, runDir, socket, config string
	logPath                               string
	client                                *api.Client
	cmd                                   *exec.Cmd
	exited                                chan struct{}
	exitErr                               error
	networks                              []string // names in the current config
}

// newEnv makes the temp dirs (short paths: unix socket paths under the run
// dir are limited) and registers the cleanup of everything a test may leave.
func newEnv(t *testing.T) *env {
	t.Helper()
	setup(t)
	dir, err := os.MkdirTemp("", "kte-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir,
		stateDir: filepath.Join(dir, "state"), runDir: filepath.Join(dir, "run"),
		socket: filepath.Join(dir, "kurmad.sock"), config: filepath.Join(dir, "kurmad.json"),
		logPath: filepath.Join(dir, "kurmad.log"),
	}
	e.client = api.NewClient(e.socket)
	t.Cleanup(func() {
		// Last: whatever is still mounted under dir, then dir, then bridges.
		testutil.UnmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("cleanup: %v", err)
		}
		for _, b := range e2eBridges {
			if l, err := netlink.LinkByName(b); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
		deleteLinksWithPrefix("kte")
	})
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("KURMA_E2E_LOG") != "" {
			e.dumpLog()
		}
		if e.running() {
			e.stop()
		}
	})
	return e
}

func (e *env) dumpLog() {
	data, err := os.ReadFile(e.logPath)
	if err != nil {
		return
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 300 {
		lines = lines[len(lines)-300:]
	}
	e.t.Logf("kurmad log (%s, last %d lines):\n%s", e.logPath, len(lines), strings.Join(lines, "\n"))
}

// netDef is one pod_networks entry.
type netDef struct {
	Name, Iface string
	ACI         string // "" → the test image; set → expected to fail at boot
	Default     bool
	Conf        map[string]any // CNI keys (type, bridge, ipam, behavior, ...)
}

func bridgeNet(name, bridge, subnet, iface string, def bool) netDef {
	return netDef{Name: name, Iface: iface, Default: def, Conf: map[string]any{
		"type": "bridge", "bridge": bridge, "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "subnet": subnet},
	}}
}

func cnitestNet(name, behavior string) netDef {
	return netDef{Name: name, Conf: map[string]any{"type": "cnitest", "behavior": behavior}}
}

// writeConfig writes the daemon's config; extra adds top-level keys.
func (e *env) writeConfig(nets []netDef, extra map[string]any) {
	e.t.Helper()
	cfg := map[string]any{"state_dir": e.stateDir, "run_dir": e.runDir, "plugin_timeout": "20s"}
	for k, v := range extra {
		cfg[k] = v
	}
	var list []map[string]any
	e.networks = nil
	for _, n := range nets {
		m := map[string]any{"name": n.Name, "aci": "file://" + testImage()}
		if n.ACI != "" {
			m["aci"] = n.ACI
		}
		if n.Default {
			m["default"] = true
		}
		if n.Iface != "" {
			m["containerInterface"] = n.Iface
		}
		for k, v := range n.Conf {
			m[k] = v
		}
		list = append(list, m)
		if n.ACI == "" && n.Conf["type"] != "nosuchplugin" {
			e.networks = append(e.networks, n.Name) // waitReady waits for these
		}
	}
	cfg["pod_networks"] = list
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(e.config, data, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// start boots kurmad with env added to its environment and waits for its
// socket and for every network to be running.
func (e *env) start(extraEnv ...string) {
	e.t.Helper()
	e.startNoWait(extraEnv...)
	e.waitReady()
}

func (e *env) startNoWait(extraEnv ...string) {
	e.t.Helper()
	if e.running() {
		e.t.Fatal("kurmad already running")
	}
	logf, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(logf, "==== kurmad start %s env=%v\n", time.Now().Format(time.RFC3339Nano), extraEnv)
	cmd := exec.Command(bin("kurmad"), "--config", e.config, "--socket", e.socket, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), extraEnv...)
	if err := cmd.Start(); err != nil {
		logf.Close()
		e.t.Fatal(err)
	}
	logf.Close()
	e.cmd = cmd
	e.exited = make(chan struct{})
	go func() {
		e.exitErr = cmd.Wait()
		close(e.exited)
	}()
}

func (e *env) running() bool {
	if e.cmd == nil {
		return false
	}
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

func (e *env) waitReady() {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if !e.running() {
			e.t.Fatalf("kurmad exited during boot: %v", e.exitErr)
		}
		if time.Now().After(deadline) {
			e.t.Fatal("kurmad did not become ready in 90s")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		nets, err := e.client.Networks(ctx)
		cancel()
		if err == nil && allRunning(nets, e.networks) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func allRunning(nets []api.Network, want []string) bool {
	state := map[string]string{}
	for _, n := range nets {
		state[n.Name] = n.State
	}
	for _, w := range want {
		if state[w] != api.StateRunning {
			return false
		}
	}
	return true
}

// stop sends SIGTERM and waits (SIGKILL after 45s); kurmad must exit 0.
func (e *env) stop() {
	e.t.Helper()
	if !e.running() {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
		if e.exitErr != nil {
			e.t.Errorf("kurmad exited with %v after SIGTERM", e.exitErr)
		}
	case <-time.After(45 * time.Second):
		e.t.Error("kurmad did not exit 45s after SIGTERM; killing it")
		e.kill9()
	}
}

// kill9 kills kurmad abruptly and waits for it.
func (e *env) kill9() {
	e.t.Helper()
	if !e.running() {
		return
	}
	_ = e.cmd.Process.Kill()
	<-e.exited
}

// waitExit waits for kurmad to exit on its own (a failpoint).
func (e *env) waitExit(d time.Duration) {
	e.t.Helper()
	select {
	case <-e.exited:
	case <-time.After(d):
		e.t.Fatalf("kurmad still running after %v", d)
	}
}

// ctl runs kurmactl against this env's socket.
func (e *env) ctl(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(bin("kurmactl"), append([]string{"--socket", e.socket}, args...)...)
	var o, s bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &s
	err = cmd.Run()
	return o.String(), s.String(), err
}

// mustCtl runs kurmactl and fails the test unless it exits 0.
func (e *env) mustCtl(args ...string) string {
	e.t.Helper()
	out, errOut, err := e.ctl(args...)
	if err != nil {
		e.t.Fatalf("kurmactl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// createPod runs `kurmactl pod create -o json` with args and decodes it.
func (e *env) createPod(args ...string) *api.Pod {
	e.t.Helper()
	out := e.mustCtl(append([]string{"pod", "create", "-o", "json"}, args...)...)
	var p api.Pod
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		e.t.Fatalf("pod create output: %v\n%s", err, out)
	}
	return &p
}

func (e *env) listPods() []api.Pod {
	e.t.Helper()
	out := e.mustCtl("pod", "ls", "-o", "json")
	var pods []api.Pod
	if err := json.Unmarshal([]byte(out), &pods); err != nil {
		e.t.Fatalf("pod ls output: %v\n%s", err, out)
	}
	return pods
}

// podIPs returns the result addresses (without prefix length) of each attachment.
func podIPs(t *testing.T, p *api.Pod) map[string]string {
	t.Helper()
	ips := map[string]string{}
	for _, a := range p.Networks {
		var r struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		}
		if err := json.Unmarshal(a.Result, &r); err != nil {
			t.Fatalf("pod %s network %s result: %v: %s", p.ID, a.Name, err, a.Result)
		}
		if len(r.IPs) > 0 {
			ips[a.Name], _, _ = strings.Cut(r.IPs[0].Address, "/")
		}
	}
	return ips
}

// ping pings ip from inside the netns at nsPath.
func ping(t *testing.T, nsPath, ip string) {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+nsPath, "ping", "-c1", "-W2", ip).CombinedOutput()
	if err != nil {
		t.Errorf("ping %s from %s: %v\n%s", ip, nsPath, err, out)
	}
}

// checkCleanLive checks, with kurmad running, that no pod is journaled and
// nothing a pod had is left: netns files, pod dirs, host-local reservations,
// veths on our bridges, links named kte*.
func (e *env) checkCleanLive() {
	e.t.Helper()
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := e.client.ListPods(ctx)
	if err != nil {
		t.Errorf("GET /v1/pods: %v", err)
	} else if len(pods) != 0 {
		t.Errorf("journal still has %d pod(s): %+v", len(pods), pods)
	}
	e.checkCleanFiles()
}

// checkCleanFiles checks what can be checked without the daemon.
func (e *env) checkCleanFiles() {
	e.t.Helper()
	t := e.t
	for _, d := range []string{filepath.Join(e.runDir, "netns"), filepath.Join(e.runDir, "pods")} {
		entries, _ := os.ReadDir(d)
		for _, en := range entries {
			t.Errorf("left behind: %s", filepath.Join(d, en.Name()))
		}
	}
	for _, f := range testutil.HostLocalLeases(e.stateDir) {
		t.Errorf("host-local reservation left behind: %s", f)
	}
	for _, l := range podVeths() {
		t.Errorf("veth left behind: %s", l)
	}
}

// checkCleanStopped checks, after kurmad stopped, that its mounts, cgroups
// and processes are gone too.
func (e *env) checkCleanStopped() {
	e.t.Helper()
	t := e.t
	if e.running() {
		t.Fatal("checkCleanStopped with kurmad running")
	}
	e.checkCleanFiles()
	for _, m := range testutil.MountsUnder(e.dir) {
		t.Errorf("mount left behind: %s", m)
	}
	for _, h := range testutil.CgroupHierarchies() {
		p := filepath.Join(h, testutil.CgroupParent(e.runDir))
		if _, err := os.Stat(p); err == nil {
			t.Errorf("cgroup left behind: %s", p)
		}
	}
	// Processes of a container being torn down may take a moment to go.
	var stray []string
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if stray = e.strayProcesses(); len(stray) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range stray {
		t.Errorf("process left behind: %s", p)
	}
}

// podVeths lists veths enslaved to our bridges and links named kte*.
func podVeths() []string {
	links, err := netlink.LinkList()
	if err != nil {
		return []string{"netlink: " + err.Error()}
	}
	masters := map[int]string{}
	for _, l := range links {
		for _, b := range e2eBridges {
			if l.Attrs().Name == b {
				masters[l.Attrs().Index] = b
			}
		}
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		if b, ok := masters[a.MasterIndex]; ok && l.Type() == "veth" {
			out = append(out, fmt.Sprintf("%s (on %s)", a.Name, b))
		} else if strings.HasPrefix(a.Name, "kte") {
			out = append(out, a.Name)
		}
	}
	return out
}

func deleteLinksWithPrefix(prefix string) {
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			_ = netlink.LinkDel(l)
		}
	}
}

// strayProcesses lists processes that belong to this env: a command line
// naming its dir or the binaries' dir (kurmad, a hanging cnitest child), or
// membership of the env's plugin cgroups.
func (e *env) strayProcesses() []string {
	procs, _ := os.ReadDir("/proc")
	var out []string
	self := os.Getpid()
	for _, p := range procs {
		pid := 0
		if _, err := fmt.Sscanf(p.Name(), "%d", &pid); err != nil || pid == self {
			continue
		}
		// A zombie holds nothing but its pid; the host's init reaps it.
		if stat, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "stat")); isZombie(stat) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		cl := strings.ReplaceAll(string(cmdline), "\x00", " ")
		cg, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cgroup"))
		if strings.Contains(cl, e.dir) || strings.Contains(cl, "cnitest-hang-child") ||
			strings.Contains(string(cg), "/"+testutil.CgroupParent(e.runDir)+"/") {
			out = append(out, fmt.Sprintf("pid %d: %s", pid, cl))
		}
	}
	return out
}

// removeAllPods deletes every pod kurmad lists, through kurmactl.
func (e *env) removeAllPods() {
	e.t.Helper()
	pods := e.listPods()
	if len(pods) == 0 {
		return
	}
	args := []string{"pod", "rm"}
	for _, p := range pods {
		args = append(args, p.ID)
	}
	e.mustCtl(args...)
}

// exitCode returns a command error's exit code (-1 when not an exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// isZombie tells from /proc/<pid>/stat whether the process is a zombie.
func isZombie(stat []byte) bool {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}
