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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// Kernel objects this package may touch (see docs/architecture.md, "a test
// that touches the kernel").
var e2eBridges = []string{"kt-e2e0", "kt-e2e1"}

// e2eLinkPrefix names the links the tests' plugins make outside bridges
// (cnitest's veths).
const e2eLinkPrefix = "kte"

const buildVersion = "e2e-test"

var (
	setupOnce sync.Once
	binDir    string // kurmad, kurmactl, kurma-init, kurma-agent, cnitest
	imageDir  string // kurma-e2e.aci
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	if imageDir != "" {
		os.RemoveAll(imageDir)
	}
	os.Exit(code)
}

// setup is every test's first call: root or skip/fail, then the binaries and
// the test image, built once per test binary.
func setup(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	// kurmad with failpoints (KURMA_FAILPOINT), which release builds lack.
	testutil.Build(t, testutil.BuildOptions{Cgo: true, Version: buildVersion, Failpoints: true}, "./cmd/kurmad", "./cmd/kurmactl", "./cmd/kurma-init")
	// networkpod looks for kurma-agent and kurma-init beside kurmad.
	binDir = testutil.Build(t, testutil.BuildOptions{}, "./cmd/kurma-agent", "./internal/testplugins/cnitest")
	setupOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kte-img-")
		if err != nil {
			t.Fatal(err)
		}
		imageDir = dir
		testutil.DeriveACI(t, testutil.BuiltImage(t, "cni-netplugin.aci"), testImage(), "e2e",
			map[string]string{"/opt/cni/bin/cnitest": filepath.Join(binDir, "cnitest")})
	})
	if _, err := os.Stat(testImage()); err != nil {
		t.Fatalf("test image: %v", err)
	}
}

func bin(name string) string { return filepath.Join(binDir, name) }

// testImage is cni-netplugin.aci plus /opt/cni/bin/cnitest, version "e2e".
func testImage() string { return filepath.Join(imageDir, "kurma-e2e.aci") }

// env is one test's kurmad (at most one process at a time) on its own dirs.
type env struct {
	*testutil.Kurmad
	t        *testing.T
	networks []string // names in the current config that must run
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
	k, err := testutil.NewKurmad(bin("kurmad"), dir)
	if err != nil {
		t.Fatal(err)
	}
	k.LogLevel = "debug"
	// A stop stops the plugin containers too, which the tests check
	// (checkCleanStopped); the tests of adoption across a restart clear it.
	k.StopPlugins = true
	e := &env{Kurmad: k, t: t}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("KURMA_E2E_LOG") != "" {
			t.Logf("kurmad log (%s, last 300 lines):\n%s", k.LogPath, k.LogTail(300))
		}
		if k.Running() {
			e.stop()
		}
		if err := k.Cleanup(10 * time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		testutil.DeleteBridges(e2eBridges, e2eLinkPrefix)
	})
	return e
}

// netDef is one pod_networks entry.
type netDef struct {
	Name, Iface string
	Image       string // "" → the test image; set → expected to fail at boot
	Default     bool
	Conf        map[string]any // CNI keys (type, bridge, ipam, behavior, ...)
}

func bridgeNet(name, bridge, subnet, iface string, def bool) netDef {
	return netDef{Name: name, Iface: iface, Default: def, Conf: map[string]any{
		"type": "bridge", "bridge": bridge, "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "subnet": subnet},
	}}
}

// cnitestStateDir is where cnitest keeps its marks: in the plugin
// container, the network's state dir, which the test finds on the host at
// <state_dir>/networks/<name> of its own kurmad.
const cnitestStateDir = "/var/lib/cni"

func cnitestNet(name, behavior string) netDef {
	return netDef{Name: name, Conf: cnitestConf(behavior)}
}

// cnitestConf is the CNI config of a cnitest plugin with the given behavior.
func cnitestConf(behavior string) map[string]any {
	return map[string]any{"type": "cnitest", "behavior": behavior, "stateDir": cnitestStateDir}
}

// writeConfig writes the daemon's config; extra adds top-level keys.
func (e *env) writeConfig(nets []netDef, extra map[string]any) {
	e.t.Helper()
	cfg := map[string]any{"plugin_timeout": "20s"}
	for k, v := range extra {
		cfg[k] = v
	}
	var list []map[string]any
	e.networks = nil
	for _, n := range nets {
		m := map[string]any{"name": n.Name, "image": "file://" + testImage()}
		if n.Image != "" {
			m["image"] = n.Image
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
		if n.Image == "" && n.Conf["type"] != "nosuchplugin" {
			e.networks = append(e.networks, n.Name) // start waits for these
		}
	}
	cfg["pod_networks"] = list
	if err := e.WriteConfig(cfg); err != nil {
		e.t.Fatal(err)
	}
}

// start boots kurmad with env added to its environment and waits for its
// ready line, for every network to be running, and for the teardowns
// reconcile left waiting for them to finish.
func (e *env) start(extraEnv ...string) {
	e.t.Helper()
	if err := e.Start(extraEnv...); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.WaitReady(context.Background(), 90*time.Second, e.networks); err != nil {
		e.t.Fatal(err)
	}
	e.settle()
}

// settle waits until no pod's teardown waits or is retried and the gc of
// no network start waits for waits: reconcile's dels and gcs wait for the
// networks' plugin containers, which run only once their images are
// fetched (the gc of a network that cannot run waits on).
func (e *env) settle() {
	e.t.Helper()
	testutil.WaitFor(e.t, 30*time.Second, "kurmad's teardowns and gcs to finish", func() error {
		info, err := e.Client.Info(context.Background())
		if err != nil {
			return err
		}
		if info.Teardowns > 0 {
			return fmt.Errorf("%d pods' teardowns not finished", info.Teardowns)
		}
		if w := slices.DeleteFunc(info.GCWaiting, func(n string) bool { return !slices.Contains(e.networks, n) }); len(w) > 0 {
			return fmt.Errorf("gcs of %v wait", w)
		}
		return nil
	})
}

// stop sends SIGTERM and waits (SIGKILL after 45s); kurmad must exit 0.
func (e *env) stop() {
	e.t.Helper()
	if err := e.Stop(45 * time.Second); err != nil {
		e.t.Error(err)
	}
}

// waitExit waits for kurmad to exit on its own (a failpoint).
func (e *env) waitExit(d time.Duration) {
	e.t.Helper()
	if err := e.WaitExit(d); err != nil {
		e.t.Fatal(err)
	}
}

// ctl runs kurmactl against this env's socket.
func (e *env) ctl(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(bin("kurmactl"), append([]string{"--socket", e.Socket}, args...)...)
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
	for _, a := range p.Attachments {
		var r struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		}
		if err := json.Unmarshal(a.Result, &r); err != nil {
			t.Fatalf("pod %s network %s result: %v: %s", p.ID, a.Network, err, a.Result)
		}
		if len(r.IPs) > 0 {
			ips[a.Network], _, _ = strings.Cut(r.IPs[0].Address, "/")
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
	pods, err := e.Client.ListPods(ctx)
	if err != nil {
		t.Errorf("GET /v1/pods: %v", err)
	} else if len(pods) != 0 {
		t.Errorf("journal still has %d pod(s): %+v", len(pods), pods)
	}
	e.checkCleanFiles()
}

// checkCleanFiles checks what can be checked without the daemon. A delete
// removes its pod's dir just after its answer (a stopped kurmad did before
// it stopped), so the dirs are waited for.
func (e *env) checkCleanFiles() {
	e.t.Helper()
	_ = testutil.Poll(context.Background(), 10*time.Second, "the deleted pods' dirs to go", func() error {
		if dirs := e.PodObjects(nil).PodDirs; len(dirs) > 0 {
			return fmt.Errorf("pod dirs %v", dirs)
		}
		return nil
	})
	for _, o := range e.PodObjects(e2eBridges).List() {
		e.t.Errorf("left behind: %s", o)
	}
	for _, l := range testutil.LinksWithPrefix(e2eLinkPrefix) {
		e.t.Errorf("link left behind: %s", l)
	}
}

// podVeths lists the pods' veths: on our bridges, or named kte*.
func (e *env) podVeths() []string {
	return append(testutil.BridgeVeths(e2eBridges), testutil.LinksWithPrefix(e2eLinkPrefix)...)
}

// checkCleanStopped checks, after kurmad stopped, that its mounts, cgroups
// and processes are gone too.
func (e *env) checkCleanStopped() {
	e.t.Helper()
	t := e.t
	if e.Running() {
		t.Fatal("checkCleanStopped with kurmad running")
	}
	e.checkCleanFiles()
	for _, m := range e.Mounts() {
		t.Errorf("mount left behind: %s", m)
	}
	for _, d := range e.CgroupDirs() {
		t.Errorf("cgroup left behind: %s", d)
	}
	// Processes of a container being torn down may take a moment to go.
	err := testutil.Poll(context.Background(), 3*time.Second, "kurmad's processes to end", func() error {
		if ps := e.Processes(); len(ps) > 0 {
			return fmt.Errorf("left behind: %s", strings.Join(ps, "; "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// exitCode returns a command error's exit code (-1 when not an exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
