package e2e

// Real runtimes on kurmad (issue 9): kurma-cni called by libcni (the
// library every CNI runtime links), cnitool, podman and containerd, against
// a real kurmad whose network rtnet runs bridge + host-local + portmap +
// bandwidth + tuning in its plugin container. Kernel names: bridge kt-rt0,
// subnet 10.217.0.0/16, links ktr*, CNI networks ktrt*.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

const (
	rtBridge     = "kt-rt0"
	rtSubnet     = "10.217.0.0/16"
	rtLinkPrefix = "ktr"
	rtNetwork    = "rtnet" // the kurma network
)

// rtEnv is a running kurmad with rtnet, and the CNI bin dir runtimes use:
// kurma-cni and the host plugins a conflist chains after it.
type rtEnv struct {
	*env
	cniBin string
}

func newRuntimeEnv(t *testing.T) *rtEnv {
	t.Helper()
	return newRuntimeEnvWith(t, nil)
}

// newRuntimeEnvWith is newRuntimeEnv with extra top-level config keys.
func newRuntimeEnvWith(t *testing.T, extra map[string]any) *rtEnv {
	t.Helper()
	e := newEnv(t)
	dir := testutil.Build(t, testutil.BuildOptions{}, "./cmd/kurma-cni",
		"github.com/containernetworking/plugins/plugins/meta/tuning",
		"github.com/containernetworking/cni/cnitool")
	t.Cleanup(func() { testutil.DeleteBridges([]string{rtBridge}, rtLinkPrefix) })
	e.writeConfig([]netDef{{Name: rtNetwork, Conf: map[string]any{
		"cniVersion": "1.0.0",
		"plugins": []map[string]any{
			{"type": "bridge", "bridge": rtBridge, "isGateway": true, "capabilities": map[string]bool{"ips": true},
				"ipam": map[string]any{"type": "host-local", "subnet": rtSubnet}},
			{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
			{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
			{"type": "tuning", "capabilities": map[string]bool{"mac": true}},
		},
	}}}, extra)
	e.start()
	return &rtEnv{env: e, cniBin: dir}
}

// kurmaCNI is a runtime's kurma-cni entry for rtnet on this kurmad.
func (r *rtEnv) kurmaCNI() map[string]any {
	return map[string]any{"type": "kurma-cni", "network": rtNetwork, "socket": r.Socket,
		"capabilities": map[string]bool{"portMappings": true, "ips": true, "mac": true, "bandwidth": true}}
}

// conflist is a runtime's conflist: kurma-cni, then the given host
// plugins.
func (r *rtEnv) conflist(version, name string, after ...map[string]any) []byte {
	plugins := append([]map[string]any{r.kurmaCNI()}, after...)
	b, _ := json.Marshal(map[string]any{"cniVersion": version, "name": name, "plugins": plugins})
	return b
}

// libcni is the runtime side as every libcni runtime has it, with its own
// cache dir.
func (r *rtEnv) libcni(t *testing.T) *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{r.cniBin}, t.TempDir(), nil)
}

// runtimeNetns makes a namespace as a runtime does, holding a link of the
// runtime's own, and removes it at the end.
func runtimeNetns(t *testing.T, name string) string {
	t.Helper()
	p := testutil.NewNetnsFile(t, filepath.Join(t.TempDir(), name))
	testutil.AddLinksIn(t, p, "ktrown")
	return p
}

// checkRuntimeNetns checks that kurma left the runtime's namespace as it
// found it: mounted, its own link there, nothing of kurma's.
func checkRuntimeNetns(t *testing.T, ns string) {
	t.Helper()
	links, err := netnsfile.Links(ns)
	if err != nil {
		t.Fatalf("the runtime's namespace %s: %v", ns, err)
	}
	slices.Sort(links)
	if !slices.Equal(links, []string{"ktrown", "lo"}) {
		t.Errorf("links in the runtime's namespace %v, want its own (ktrown, lo)", links)
	}
}

// checkNoPods checks kurmad holds no pod and nothing of one is left.
func (r *rtEnv) checkNoPods(t *testing.T) {
	t.Helper()
	pods, err := r.Client.ListPods(context.Background())
	if err != nil || len(pods) != 0 {
		t.Errorf("kurmad holds %d pods (%v): %+v", len(pods), err, pods)
	}
	for _, o := range r.PodObjects([]string{rtBridge}).List() {
		t.Errorf("left behind: %s", o)
	}
}

func cniCode(err error) (uint, string) {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code, e.Msg
	}
	return 0, ""
}

// TestKurmaCNIConformance: for every cniVersion 0.3.0-1.1.0, libcni runs a
// conflist of kurma-cni chained with the host's tuning: ADD attaches in the
// runtime's namespace and the result comes back in that version, through
// tuning (prevResult out and in); the pod shows the runtime as owner; DEL
// leaves nothing and is idempotent (again, and for a container never seen),
// and the runtime's namespace is as it was. STATUS (1.1.0) answers ready.
// CHECK (0.4.0 and later) passes after ADD, and fails with the plugin's
// message once the pod's veth was deleted by hand.
func TestKurmaCNIConformance(t *testing.T) {
	r := newRuntimeEnv(t)
	cni := r.libcni(t)
	ctx := context.Background()
	tuning := map[string]any{"type": "tuning", "sysctl": map[string]string{"net.ipv4.conf.IFNAME.arp_notify": "1"}}
	self, _ := os.ReadFile("/proc/self/comm")
	for i, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			list, err := libcni.ConfListFromBytes(r.conflist(v, fmt.Sprintf("ktrt%d", i), tuning))
			if err != nil {
				t.Fatal(err)
			}
			ns := runtimeNetns(t, "ktrtns")
			rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("conform%d", i), NetNS: ns, IfName: "eth0",
				Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "web"}}}
			res, err := cni.AddNetworkList(ctx, list, rt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Version() != v {
				t.Errorf("result version %s, want %s", res.Version(), v)
			}
			cur, err := current.NewResultFromResult(res)
			if err != nil {
				t.Fatal(err)
			}
			if len(cur.IPs) != 1 || !testutil.HasIP(testutil.IPv4In(t, ns, "eth0"), cur.IPs[0].Address.IP) {
				t.Fatalf("result %+v; eth0 in the runtime's namespace has %v", cur, testutil.IPv4In(t, ns, "eth0"))
			}
			pods, err := r.Client.FindPods(ctx, api.RuntimeRef{ContainerID: rt.ContainerID})
			if err != nil || len(pods) != 1 {
				t.Fatalf("kurmad's pods of %s: %+v, %v", rt.ContainerID, pods, err)
			}
			p := pods[0]
			want := api.Runtime{Owner: strings.TrimSpace(string(self)), ContainerID: rt.ContainerID, Interface: "eth0", Network: list.Name, Netns: ns}
			if p.Name != "ns/web" || p.Runtime == nil || *p.Runtime != want {
				t.Errorf("pod name %q runtime %+v, want ns/web and %+v", p.Name, p.Runtime, want)
			}
			if out := r.mustCtl("pod", "ls"); !strings.Contains(out, want.Owner+"/"+rt.ContainerID) {
				t.Errorf("pod ls lacks the owner %s/%s:\n%s", want.Owner, rt.ContainerID, out)
			}
			if v == "1.1.0" {
				if err := cni.GetStatusNetworkList(ctx, list); err != nil {
					t.Errorf("STATUS: %v", err)
				}
			}
			if v >= "0.4.0" {
				checkAfterVethGone(t, cni, list, rt)
			}
			for range 2 {
				if err := cni.DelNetworkList(ctx, list, rt); err != nil {
					t.Fatalf("DEL: %v", err)
				}
			}
			never := *rt
			never.ContainerID = "neverseen"
			if err := cni.DelNetworkList(ctx, list, &never); err != nil {
				t.Errorf("DEL of a container never seen: %v", err)
			}
			r.checkNoPods(t)
			checkRuntimeNetns(t, ns)
		})
	}
}

// checkAfterVethGone: CHECK passes on the attachment as ADD left it; with
// its eth0 deleted by hand it fails with kurma-cni's error, the message of
// rtnet's plugin (999: CNI has no code for it).
func checkAfterVethGone(t *testing.T, cni *libcni.CNIConfig, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) {
	t.Helper()
	ctx := context.Background()
	if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	testutil.DelLinkIn(t, rt.NetNS, rt.IfName)
	err := cni.CheckNetworkList(ctx, list, rt)
	if code, msg := cniCode(err); code != types.ErrInternal || !strings.Contains(msg, "check failed") || !strings.Contains(msg, rtNetwork) {
		t.Errorf("CHECK with the veth gone: %v (code %d), want 999 naming %s", err, code, rtNetwork)
	}
}

// TestKurmaCNIGC: GC with cni.dev/valid-attachments releases exactly the
// attachments of that CNI network that are not listed: one libcni's cache
// knows (libcni DELs it itself) and one it does not (kurma-cni's GC has
// kurmad release it through the plugins' del); the valid one stays, and
// so do another CNI network's and another runtime's (owner) on the same
// CNI network, which this runtime cannot list.
func TestKurmaCNIGC(t *testing.T) {
	r := newRuntimeEnv(t)
	ctx := context.Background()
	cni, other := r.libcni(t), r.libcni(t) // other: a cache this GC does not read
	list, err := libcni.ConfListFromBytes(r.conflist("1.1.0", "ktrtgc"))
	if err != nil {
		t.Fatal(err)
	}
	list2, err := libcni.ConfListFromBytes(r.conflist("1.1.0", "ktrtgc2"))
	if err != nil {
		t.Fatal(err)
	}
	add := func(c *libcni.CNIConfig, l *libcni.NetworkConfigList, id string) *libcni.RuntimeConf {
		t.Helper()
		rt := &libcni.RuntimeConf{ContainerID: id, NetNS: runtimeNetns(t, id), IfName: "eth0"}
		if _, err := c.AddNetworkList(ctx, l, rt); err != nil {
			t.Fatal(err)
		}
		return rt
	}
	keep := add(cni, list, "gckeep")
	add(cni, list, "gccached")
	add(other, list, "gcuncached")
	otherNet := add(cni, list2, "gcothernet")
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "ktrtgc",
		"plugins": []map[string]any{{"type": "kurma-cni", "network": rtNetwork, "socket": r.Socket, "owner": "otherruntime"}}})
	listOwner, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	otherOwner := add(r.libcni(t), listOwner, "gcotherowner")
	err = cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "gckeep", IfName: "eth0"}}})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := r.Client.ListPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range pods {
		left = append(left, p.Runtime.ContainerID)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"gckeep", "gcothernet", "gcotherowner"}) {
		t.Errorf("after GC kurmad holds %v, want gckeep, gcothernet and gcotherowner", left)
	}
	for _, c := range []struct {
		l  *libcni.NetworkConfigList
		rt *libcni.RuntimeConf
	}{{list, keep}, {list2, otherNet}, {listOwner, otherOwner}} {
		if err := cni.DelNetworkList(ctx, c.l, c.rt); err != nil {
			t.Fatal(err)
		}
	}
	r.checkNoPods(t)
}

// TestKurmaCNIUnavailable: with kurmad stopped ADD and DEL are CNI code 11
// naming the socket; while rtnet restarts (its main process killed) STATUS
// is code 50 naming it, and ready again once it runs.
func TestKurmaCNIUnavailable(t *testing.T) {
	r := newRuntimeEnv(t)
	ctx := context.Background()
	cni := r.libcni(t)
	list, err := libcni.ConfListFromBytes(r.conflist("1.1.0", "ktrtdown"))
	if err != nil {
		t.Fatal(err)
	}

	nets, err := r.Client.Networks(ctx)
	if err != nil || len(nets) != 1 || nets[0].Pid == 0 {
		t.Fatalf("networks %+v, %v", nets, err)
	}
	if err := syscall.Kill(nets[0].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "STATUS to say rtnet is not ready", func() error {
		err := cni.GetStatusNetworkList(ctx, list)
		if code, msg := cniCode(err); code != 50 || !strings.Contains(msg, `network "rtnet" is not ready`) {
			return fmt.Errorf("STATUS = %v", err)
		}
		return nil
	})
	testutil.WaitFor(t, 30*time.Second, "STATUS to say ready once rtnet restarted", func() error {
		return cni.GetStatusNetworkList(ctx, list)
	})

	r.stop()
	rt := &libcni.RuntimeConf{ContainerID: "down", NetNS: runtimeNetns(t, "down"), IfName: "eth0"}
	_, err = cni.AddNetworkList(ctx, list, rt)
	if code, msg := cniCode(err); code != types.ErrTryAgainLater || !strings.Contains(msg, r.Socket) {
		t.Errorf("ADD with kurmad down: %v, want code 11 naming %s", err, r.Socket)
	}
	if code, _ := cniCode(cni.DelNetworkList(ctx, list, rt)); code != types.ErrTryAgainLater {
		t.Errorf("DEL with kurmad down: code %d, want 11", code)
	}
	if code, _ := cniCode(cni.GetStatusNetworkList(ctx, list)); code != 50 {
		t.Errorf("STATUS with kurmad down: code %d, want 50", code)
	}
}

// TestKurmaCNIKill9: kurmad is killed -9 between a runtime's ADD and DEL;
// once it is back, the runtime's DEL cleans everything up, and kurmad
// never removed the runtime's namespace (its bind mount kept the namespace
// reachable across the crash).
func TestKurmaCNIKill9(t *testing.T) {
	r := newRuntimeEnv(t)
	ctx := context.Background()
	cni := r.libcni(t)
	list, err := libcni.ConfListFromBytes(r.conflist("1.0.0", "ktrtkill"))
	if err != nil {
		t.Fatal(err)
	}
	ns := runtimeNetns(t, "kill9")
	rt := &libcni.RuntimeConf{ContainerID: "kill9", NetNS: ns, IfName: "eth0"}
	if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	checkRuntimeNetnsHas(t, ns, "eth0")
	r.start()
	if pods, err := r.Client.FindPods(ctx, api.RuntimeRef{ContainerID: "kill9"}); err != nil || len(pods) != 1 {
		t.Fatalf("after the restart kurmad holds %+v (%v), want the runtime's pod adopted", pods, err)
	}
	if err := cni.DelNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	r.checkNoPods(t)
	checkRuntimeNetns(t, ns)
}

func checkRuntimeNetnsHas(t *testing.T, ns, link string) {
	t.Helper()
	links, err := netnsfile.Links(ns)
	if err != nil || !slices.Contains(links, link) {
		t.Fatalf("runtime's namespace: links %v (%v), want %s", links, err, link)
	}
}

// TestKurmactlPublish: kurmactl pod create --publish HOST:80 on a pod
// kurmad makes: a server in the pod's netns is reached through the host
// port on 127.0.0.1; --bandwidth shapes the pod's host veth; pod rm
// removes the rule, the shaping and its ifb device.
func TestKurmactlPublish(t *testing.T) {
	r := newRuntimeEnv(t)
	port := freePort(t)
	p := r.createPod("--net", rtNetwork, "--publish", fmt.Sprintf("%d:80", port), "--bandwidth", "10mbit")
	serveIn(t, p.Netns, "kurmactl-publish")
	getPage(t, port, "kurmactl-publish")
	if !portRule(t, port) {
		t.Errorf("no nftables rule for port %d while the pod runs", port)
	}
	veths := testutil.BridgeVeths([]string{rtBridge})
	if len(veths) != 1 {
		t.Fatalf("veths on %s: %v", rtBridge, veths)
	}
	veth, _, _ := strings.Cut(veths[0], " ") // "vethX on kt-rt0"
	if out, err := exec.Command("tc", "qdisc", "show", "dev", veth).CombinedOutput(); err != nil || !strings.Contains(string(out), "tbf") ||
		!strings.Contains(string(out), "rate 10Mbit") {
		t.Errorf("qdiscs of the pod's veth %s: %v\n%s", veth, err, out)
	}
	if ifbs := testutil.LinksWithPrefix("bwp"); len(ifbs) != 1 {
		t.Errorf("the bandwidth plugin's ifb devices: %v, want one", ifbs)
	}
	r.mustCtl("pod", "rm", p.ID)
	if portRule(t, port) {
		t.Errorf("a rule for port %d is left after pod rm", port)
	}
	if ifbs := testutil.LinksWithPrefix("bwp"); len(ifbs) != 0 {
		t.Errorf("ifb devices left after pod rm: %v", ifbs)
	}
	r.checkNoPods(t)
}

// serveIn runs busybox httpd on port 80 in the namespace at ns, serving a
// page that says text, until the test ends.
func serveIn(t *testing.T, ns, text string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte(text+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+ns, busybox(t), "httpd", "-f", "-p", "80", "-h", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// busybox is the host's static busybox.
func busybox(t *testing.T) string {
	t.Helper()
	p, err := testutil.StaticBusybox()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// getPage fetches http://127.0.0.1:port/ until it answers with text.
func getPage(t *testing.T, port int, text string) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("127.0.0.1:%d to serve the page", port), func() error {
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), text) {
			return fmt.Errorf("got %d %q", resp.StatusCode, body)
		}
		return nil
	})
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := testutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// portRule reports whether the host's nftables ruleset holds a rule for
// destination port port (portmap's DNAT).
func portRule(t *testing.T, port int) bool {
	t.Helper()
	out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v\n%s", err, out)
	}
	return strings.Contains(string(out), fmt.Sprintf("dport %d ", port))
}

// TestKurmaCNICheckPrevResult: CHECK consults the runtime's prevResult
// (libcni's cached result of the ADD): it passes as ADD left it, and fails
// with code 999 naming the address or the interface once the cached result
// says another address or another interface name than the container has.
func TestKurmaCNICheckPrevResult(t *testing.T) {
	r := newRuntimeEnv(t)
	ctx := context.Background()
	cache := t.TempDir()
	cni := libcni.NewCNIConfigWithCacheDir([]string{r.cniBin}, cache, nil)
	list, err := libcni.ConfListFromBytes(r.conflist("1.0.0", "ktrtprev"))
	if err != nil {
		t.Fatal(err)
	}
	rt := &libcni.RuntimeConf{ContainerID: "prev", NetNS: runtimeNetns(t, "prev"), IfName: "eth0"}
	if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cni.DelNetworkList(ctx, list, rt) })
	if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(cache, "results", "*"))
	if err != nil || len(files) != 1 {
		t.Fatalf("libcni's cached results: %v (%v), want one", files, err)
	}
	orig, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"another address", `"address":"10.217.0.`, `"address":"10.217.99.`, "address"},
		{"another interface", `"name":"eth0"`, `"name":"eth9"`, "interface eth0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(orig), c.from) {
				t.Fatalf("the cached result has no %s: %s", c.from, orig)
			}
			bogus := strings.Replace(string(orig), c.from, c.to, 1)
			if err := os.WriteFile(files[0], []byte(bogus), 0o600); err != nil {
				t.Fatal(err)
			}
			err := cni.CheckNetworkList(ctx, list, rt)
			if code, msg := cniCode(err); code != types.ErrInternal || !strings.Contains(msg, "prevResult") || !strings.Contains(msg, c.want) {
				t.Errorf("CHECK with a bogus prevResult: %v (code %d), want 999 naming the %s", err, code, c.want)
			}
		})
	}
	if err := os.WriteFile(files[0], orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
		t.Errorf("CHECK with the cached result restored: %v", err)
	}
	if err := cni.DelNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	r.checkNoPods(t)
}

// TestKurmaCNIStatusFresh: STATUS answers from a probe of the plugin's
// status made for it, not from the last periodic one (status_interval is
// an hour here): it fails with code 50 and the plugin's message as soon as
// the plugin says it is not ready, and passes as soon as it says it is.
func TestKurmaCNIStatusFresh(t *testing.T) {
	e := newEnv(t)
	dir := testutil.Build(t, testutil.BuildOptions{}, "./cmd/kurma-cni")
	st := cnitestNet("st", "ok")
	st.Conf["cniVersion"] = "1.1.0"
	st.Conf["notReadyFile"] = filepath.Join(cnitestStateDir, "not-ready")
	e.writeConfig([]netDef{st}, map[string]any{"status_interval": "1h"})
	e.start()
	b, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "ktrtstatus",
		"plugins": []map[string]any{{"type": "kurma-cni", "network": "st", "socket": e.Socket}}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{dir}, t.TempDir(), nil)
	ctx := context.Background()
	if err := cni.GetStatusNetworkList(ctx, list); err != nil {
		t.Fatalf("STATUS with st ready: %v", err)
	}
	notReady := filepath.Join(e.StateDir, "networks", "st", "not-ready")
	if err := os.WriteFile(notReady, []byte("uplink down\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = cni.GetStatusNetworkList(ctx, list)
	if code, msg := cniCode(err); code != 50 || !strings.Contains(msg, "uplink down") {
		t.Errorf("STATUS right after st's plugin said it is not ready: %v (code %d), want 50 with its message", err, code)
	}
	if err := os.Remove(notReady); err != nil {
		t.Fatal(err)
	}
	if err := cni.GetStatusNetworkList(ctx, list); err != nil {
		t.Errorf("STATUS right after st's plugin said it is ready again: %v", err)
	}
}

// TestCnitoolGC: `cnitool gc` (libcni's GCNetworkList without valid
// attachments) has libcni DEL every attachment of that CNI network in its
// cache (/var/lib/cni: both cnitool ADDs here) before kurma-cni's GC is
// asked: kurmad holds no pod after it, as docs/runtimes.md says.
func TestCnitoolGC(t *testing.T) {
	r := newRuntimeEnv(t)
	const name = "ktrtcgc"
	forgetCNICache(t, name)
	confDir := writeConflist(t, name, r.conflist("1.1.0", name))
	for _, id := range []string{"cgc1", "cgc2"} {
		if _, err := r.cnitool(confDir, "add", name, runtimeNetns(t, id)); err != nil {
			t.Fatal(err)
		}
	}
	if pods := r.listPods(); len(pods) != 2 {
		t.Fatalf("kurmad holds %d pods after two cnitool adds, want 2", len(pods))
	}
	if out, err := r.cnitool(confDir, "gc", name, runtimeNetns(t, "cgcgc")); err != nil {
		t.Fatalf("cnitool gc: %v\n%s", err, out)
	}
	r.checkNoPods(t)
}

// TestKurmaCNIAfterAnInterface: a plugin before kurma-cni that made the
// runtime's CNI_IFNAME (here the host's bridge plugin) leaves kurma-cni's
// first network no interface to take: ADD fails naming the interface, and
// kurmad holds nothing, as docs/runtimes.md says of where kurma-cni may
// sit in a chain.
func TestKurmaCNIAfterAnInterface(t *testing.T) {
	r := newRuntimeEnv(t)
	host := testutil.Build(t, testutil.BuildOptions{}, "github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	cni := libcni.NewCNIConfigWithCacheDir([]string{r.cniBin, host}, t.TempDir(), nil)
	bridge := map[string]any{"type": "bridge", "bridge": rtBridge,
		"ipam": map[string]any{"type": "host-local", "subnet": "10.217.200.0/24", "dataDir": t.TempDir()}}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "ktrtafter", "plugins": []map[string]any{bridge, r.kurmaCNI()}})
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	rt := &libcni.RuntimeConf{ContainerID: "after", NetNS: runtimeNetns(t, "after"), IfName: "eth0"}
	_, err = cni.AddNetworkList(context.Background(), list, rt)
	if code, msg := cniCode(err); code != types.ErrInternal || !strings.Contains(msg, `interface "eth0" is taken`) {
		t.Errorf("ADD with kurma-cni after bridge: %v (code %d), want 999 naming eth0 as taken", err, code)
	}
	if err := cni.DelNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
	r.checkNoPods(t)
}
