package e2e

// A runtime's attachments under a node's everyday faults (issue 19): a DEL
// lost while kurmad is down, a bind mount lost while the container lives,
// a hung kurmad, a socket the runtime may not use, a GC that must touch
// only its own. podman's and containerd's cases are in podman_test.go and
// containerd_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
)

// checkInterval is the fault tests' runtime_check_interval: short, so
// that they wait little for kurmad's look at the runtime pods.
const checkInterval = time.Second

// faultEnv is a runtime env whose kurmad looks at its runtime pods every
// checkInterval and serves metrics on a unix socket.
type faultEnv struct {
	*rtEnv
	metrics string
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "ktrtm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "metrics.sock")
	r := newRuntimeEnvWith(t, map[string]any{"runtime_check_interval": checkInterval.String(), "metrics_listen": sock})
	return &faultEnv{rtEnv: r, metrics: sock}
}

// counter is a kurma_runtime_pods_* series of the running kurmad.
func (f *faultEnv) counter(t *testing.T, series string) float64 {
	t.Helper()
	return metric(t, scrape(t, f.metrics), series)
}

// waitReleased waits, no longer than the check interval and the time a
// release takes, until kurmad holds no pod and nothing of one is left:
// netns files, pod dirs, host-local leases, veths, and the nftables rule
// of port (0: none published).
func (f *faultEnv) waitReleased(t *testing.T, port int) {
	t.Helper()
	testutil.WaitFor(t, checkInterval+20*time.Second, "kurmad to release the dropped pod", func() error {
		pods, err := f.Client.ListPods(context.Background())
		if err != nil {
			return err
		}
		if len(pods) > 0 {
			return fmt.Errorf("kurmad holds %d pods: %+v", len(pods), pods)
		}
		if left := f.PodObjects([]string{rtBridge}).List(); len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		if port != 0 && portRule(t, port) {
			return fmt.Errorf("the nftables rule of port %d is left", port)
		}
		return nil
	})
}

// removeNetnsByHand unmounts and removes a runtime's netns file, as `ip
// netns del` or podman does.
func removeNetnsByHand(t *testing.T, path string) {
	t.Helper()
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		t.Fatalf("unmount %s: %v", path, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// exampleConflist is examples/cni/<runtime>.conflist for this kurmad: its
// CNI network named name, kurma-cni attaching rtnet through this kurmad's
// socket, with extra keys in kurma-cni's entry.
func (r *rtEnv) exampleConflist(t *testing.T, runtime, name string, extra map[string]any) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "examples", "cni", runtime+".conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	list["name"] = name
	entry := list["plugins"].([]any)[0].(map[string]any)
	entry["network"], entry["socket"] = rtNetwork, r.Socket
	for k, v := range extra {
		entry[k] = v
	}
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cnitool runs cnitool verb on CNI network name (its conflist in
// confDir) for netns, as a user would: libcni's cache in /var/lib/cni,
// which its DEL empties again (a test that runs it calls forgetCNICache,
// for the dirs it made there and a DEL it did not get to).
func (r *rtEnv) cnitool(confDir, verb, name, netns string) (string, error) {
	cmd := exec.Command(filepath.Join(r.cniBin, "cnitool"), verb, name, netns)
	cmd.Env = append(os.Environ(), "CNI_PATH="+r.cniBin, "NETCONFPATH="+confDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cnitool %s %s %s: %v\n%s", verb, name, netns, err, out)
	}
	return string(out), nil
}

// writeConflist writes a conflist into a new dir, for cnitool.
func writeConflist(t *testing.T, name string, conf []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name+".conflist"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestKurmaCNIDroppedByHand: after a cnitool ADD, the namespace is removed
// by hand and no DEL ever comes: while kurmad runs, its next look at the
// runtime pods (runtime_check_interval) releases the pod through the
// plugins' del (kurmad's bind mount still holds the namespace): no veth,
// no lease, no netns file is left, and the release is counted; the same
// when the namespace goes while kurmad is stopped, at its next boot.
// cnitool's DEL afterwards succeeds (nothing is held).
func TestKurmaCNIDroppedByHand(t *testing.T) {
	f := newFaultEnv(t)
	const name = "ktrtbyhand"
	forgetCNICache(t, name)
	confDir := writeConflist(t, name, f.exampleConflist(t, "podman", name, nil))
	ns := []string{runtimeNetns(t, "byhand1"), runtimeNetns(t, "byhand2")}
	defer func() {
		for _, n := range ns {
			if _, err := f.cnitool(confDir, "del", name, n); err != nil {
				t.Errorf("cnitool del after the release: %v", err)
			}
		}
	}()

	if _, err := f.cnitool(confDir, "add", name, ns[0]); err != nil {
		t.Fatal(err)
	}
	if pods := f.listPods(); len(pods) != 1 || pods[0].Runtime == nil || pods[0].Runtime.Owner != "cnitool" {
		t.Fatalf("kurmad's pods %+v, want cnitool's", pods)
	}
	removeNetnsByHand(t, ns[0])
	f.waitReleased(t, 0)
	if got := f.counter(t, `kurma_runtime_pods_dropped_total{reason="netns_gone"}`); got != 1 {
		t.Errorf("releases counted: %v, want 1", got)
	}

	if _, err := f.cnitool(confDir, "add", name, ns[1]); err != nil {
		t.Fatal(err)
	}
	f.stop()
	removeNetnsByHand(t, ns[1])
	f.start()
	f.waitReleased(t, 0)
	if got := f.counter(t, `kurma_runtime_pods_dropped_total{reason="netns_gone"}`); got != 1 {
		t.Errorf("releases counted after the restart: %v, want 1", got)
	}
}

// TestKurmaCNIHungKurmad: with kurmad stopped by SIGSTOP (it accepts
// connections and never answers), ADD, DEL, CHECK, GC and STATUS each
// answer "try again later" (11) naming kurmad's socket within their
// deadline + 2 s: the conflist's "timeout", and for STATUS at most 5 s
// whatever it says. Once kurmad runs again, the runtime's DELs leave
// nothing: the create whose caller gave up was rolled back or is deleted.
func TestKurmaCNIHungKurmad(t *testing.T) {
	r := newRuntimeEnv(t)
	ctx := context.Background()
	cni := r.libcni(t)
	const limit = 3 * time.Second
	list, err := libcni.ConfListFromBytes(r.exampleConflist(t, "podman", "ktrthung", map[string]any{"timeout": limit.String()}))
	if err != nil {
		t.Fatal(err)
	}
	long, err := libcni.ConfListFromBytes(r.exampleConflist(t, "podman", "ktrthung", map[string]any{"timeout": "10m"}))
	if err != nil {
		t.Fatal(err)
	}
	attached := &libcni.RuntimeConf{ContainerID: "hungok", NetNS: runtimeNetns(t, "hungok"), IfName: "eth0"}
	if _, err := cni.AddNetworkList(ctx, list, attached); err != nil {
		t.Fatal(err)
	}
	fresh := &libcni.RuntimeConf{ContainerID: "hungnew", NetNS: runtimeNetns(t, "hungnew"), IfName: "eth0"}

	pid := r.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	verbs := []struct {
		name  string
		limit time.Duration
		run   func() error
	}{
		{"ADD", limit, func() error { _, err := cni.AddNetworkList(ctx, list, fresh); return err }},
		{"DEL", limit, func() error { return cni.DelNetworkList(ctx, list, attached) }},
		{"CHECK", limit, func() error { return cni.CheckNetworkList(ctx, list, attached) }},
		{"GC", limit, func() error {
			return cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "hungok", IfName: "eth0"}}})
		}},
		{"STATUS", limit, func() error { return cni.GetStatusNetworkList(ctx, list) }},
		{"STATUS with a 10m timeout", 5 * time.Second, func() error { return cni.GetStatusNetworkList(ctx, long) }},
	}
	var wg sync.WaitGroup
	errs := make([]error, len(verbs))
	took := make([]time.Duration, len(verbs))
	for i, v := range verbs {
		wg.Go(func() {
			start := time.Now()
			errs[i] = v.run()
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, v := range verbs {
		code, msg := cniCode(errs[i])
		if code != types.ErrTryAgainLater || !strings.Contains(msg, "kurmad at "+r.Socket+" did not answer within "+v.limit.String()) {
			t.Errorf("%s with kurmad stopped: %v (code %d), want 11 naming kurmad's socket and %v", v.name, errs[i], code, v.limit)
		}
		if took[i] < v.limit || took[i] > v.limit+2*time.Second {
			t.Errorf("%s answered after %v, want at its deadline %v (+ 2 s at most)", v.name, took[i], v.limit)
		}
	}

	resume()
	testutil.WaitFor(t, 30*time.Second, "the runtime's DELs to leave nothing once kurmad runs", func() error {
		for _, rt := range []*libcni.RuntimeConf{attached, fresh} {
			if err := cni.DelNetworkList(ctx, list, rt); err != nil {
				return err
			}
		}
		if pods, err := r.Client.ListPods(ctx); err != nil || len(pods) > 0 {
			return fmt.Errorf("kurmad holds %d pods (%v)", len(pods), err)
		}
		return nil
	})
	r.checkNoPods(t)
}

// TestKurmaCNISocketRefused: a runtime that may not use kurmad's socket
// (not root; here kurma-cni run as nobody, the socket made unreadable)
// gets a permanent error at once, naming the fix, not "try again later".
func TestKurmaCNISocketRefused(t *testing.T) {
	r := newRuntimeEnv(t)
	if err := os.Chmod(r.Socket, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(r.Socket, 0o600) })
	dir, err := os.MkdirTemp("", "ktrt-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(dir, "kurma-cni")
	testutil.CopyExecutable(t, filepath.Join(r.cniBin, "kurma-cni"), plugin)
	for _, verb := range []string{"ADD", "DEL", "CHECK"} {
		cmd := exec.Command(plugin)
		cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=refused", "CNI_NETNS=/run/netns/refused", "CNI_IFNAME=eth0", "CNI_PATH=" + dir}
		conf := pluginConf(t, r.exampleConflist(t, "podman", "ktrtrefused", nil))
		if verb == "CHECK" {
			// As libcni sends it: with the ADD's result.
			var m map[string]any
			if err := json.Unmarshal(conf, &m); err != nil {
				t.Fatal(err)
			}
			m["prevResult"] = map[string]any{"cniVersion": m["cniVersion"], "interfaces": []any{}, "ips": []any{}}
			if conf, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		cmd.Stdin = bytes.NewReader(conf)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		start := time.Now()
		runErr := cmd.Run()
		took := time.Since(start)
		var e types.Error
		if err := json.Unmarshal(stdout.Bytes(), &e); err != nil || runErr == nil {
			t.Fatalf("%s as nobody: exit %v, stdout %q", verb, runErr, stdout.String())
		}
		if e.Code != types.ErrInternal || !strings.Contains(e.Msg, "permission denied") || !strings.Contains(e.Msg, "as root") || !strings.Contains(e.Msg, r.Socket) {
			t.Errorf("%s as nobody: %+v, want the permanent error 999 naming the socket and the fix (docs/runtimes.md's table)", verb, e)
		}
		if took > 2*time.Second {
			t.Errorf("%s as nobody took %v, want an answer at once", verb, took)
		}
	}
	if pods := r.listPods(); len(pods) != 0 {
		t.Errorf("kurmad holds %+v", pods)
	}
}

// pluginConf is the config libcni hands the first plugin of conflist:
// the plugin's entry with the list's name and cniVersion.
func pluginConf(t *testing.T, conflist []byte) []byte {
	t.Helper()
	list, err := libcni.ConfListFromBytes(conflist)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := libcni.InjectConf(list.Plugins[0], map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
	if err != nil {
		t.Fatal(err)
	}
	return conf.Bytes
}

// TestKurmaCNIGCScope: `cnitool gc` on its own CNI network name releases
// what libcni's cache holds of that name (libcni DELs it) and nothing
// more: kurma-cni gets no cni.dev/valid-attachments and releases nothing
// (an attachment of the same name and owner made outside cnitool's cache
// stays), and podman's container on another name keeps its attachment. A
// runtime's GC with an (empty) list then releases its own attachment,
// podman's still untouched.
func TestKurmaCNIGCScope(t *testing.T) {
	r := newRuntimeEnv(t)
	ctx := context.Background()
	const pmNet, name = "ktrtgcpm", "ktrtgccni"
	forgetCNICache(t, name)
	pm := newPodman(t, r.cniBin, map[string][]byte{pmNet: r.exampleConflist(t, "podman", pmNet, nil)})
	pmID := mustPodman(t, pm, "run", "-d", "--network", pmNet, "--rootfs", busyboxRootfs(t, "gc"), "/bin/sleep", "600")

	conf := r.exampleConflist(t, "podman", name, map[string]any{"owner": "ktgc"})
	confDir := writeConflist(t, name, conf)
	nsA := runtimeNetns(t, "gcA")
	if _, err := r.cnitool(confDir, "add", name, nsA); err != nil {
		t.Fatal(err)
	}
	// gcB: the same name and owner, made outside cnitool's cache (and
	// outside the cache of the GC below, so that only kurma-cni's GC can
	// release it).
	cni, other := r.libcni(t), r.libcni(t)
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	rtB := &libcni.RuntimeConf{ContainerID: "gcB", NetNS: runtimeNetns(t, "gcB"), IfName: "eth0"}
	if _, err := other.AddNetworkList(ctx, list, rtB); err != nil {
		t.Fatal(err)
	}
	held := func() []string {
		var ids []string
		for _, p := range r.listPods() {
			ids = append(ids, p.Runtime.ContainerID)
		}
		slices.Sort(ids)
		return ids
	}
	want := []string{"gcB", pmID}
	slices.Sort(want)
	if got := held(); len(got) != 3 {
		t.Fatalf("kurmad holds %v, want podman's, cnitool's and gcB", got)
	}

	out, err := r.cnitool(confDir, "gc", name, nsA)
	if err != nil {
		t.Fatal(err)
	}
	if got := held(); !slices.Equal(got, want) {
		t.Errorf("after cnitool gc: %v, want %v (cnitool's own released by libcni, nothing by kurma-cni)", got, want)
	}
	if !strings.Contains(out, "without cni.dev/valid-attachments: nothing released") {
		t.Errorf("cnitool gc's output does not say nothing was released:\n%s", out)
	}

	if err := cni.GCNetworkList(ctx, list, &libcni.GCArgs{}); err != nil {
		t.Fatal(err)
	}
	if got := held(); !slices.Equal(got, []string{pmID}) {
		t.Errorf("after a GC of %s with an empty list: %v, want podman's alone", name, got)
	}
	if _, err := r.cnitool(confDir, "del", name, nsA); err != nil {
		t.Error(err)
	}
	mustPodman(t, pm, "rm", "-f", "-t", "0", pmID)
	r.checkNoPods(t)
}

// TestExampleConflists: each of examples/cni's conflists has a CNI network
// name of its own and offers CNI 1.1.0 through cniVersions, which libcni
// (v1.3, ours) picks; kurma-cni then answers ADD, CHECK, STATUS, GC and
// DEL in 1.1.0.
func TestExampleConflists(t *testing.T) {
	r := newRuntimeEnv(t)
	ctx := context.Background()
	names := map[string]bool{}
	for _, runtime := range []string{"podman", "containerd", "crio"} {
		t.Run(runtime, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "examples", "cni", runtime+".conflist"))
			if err != nil {
				t.Fatal(err)
			}
			orig, err := libcni.ConfListFromBytes(b)
			if err != nil {
				t.Fatal(err)
			}
			if names[orig.Name] || !strings.Contains(orig.Name, runtime) {
				t.Errorf("%s.conflist names its network %q: want a name of its own, naming the runtime", runtime, orig.Name)
			}
			names[orig.Name] = true
			list, err := libcni.ConfListFromBytes(r.exampleConflist(t, runtime, "ktrtex"+runtime, nil))
			if err != nil {
				t.Fatal(err)
			}
			if list.CNIVersion != "1.1.0" {
				t.Fatalf("libcni reads cniVersion %s, want 1.1.0 from cniVersions", list.CNIVersion)
			}
			cni := r.libcni(t)
			rt := &libcni.RuntimeConf{ContainerID: "ex" + runtime, NetNS: runtimeNetns(t, "ex"+runtime), IfName: "eth0"}
			res, err := cni.AddNetworkList(ctx, list, rt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Version() != "1.1.0" {
				t.Errorf("result version %s, want 1.1.0", res.Version())
			}
			if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := cni.GetStatusNetworkList(ctx, list); err != nil {
				t.Errorf("STATUS: %v", err)
			}
			if err := cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: rt.ContainerID, IfName: "eth0"}}}); err != nil {
				t.Errorf("GC: %v", err)
			}
			if pods := r.listPods(); len(pods) != 1 {
				t.Errorf("after a GC listing it valid kurmad holds %d pods, want 1", len(pods))
			}
			if err := cni.DelNetworkList(ctx, list, rt); err != nil {
				t.Fatal(err)
			}
			r.checkNoPods(t)
			checkRuntimeNetns(t, rt.NetNS)
		})
	}
}
