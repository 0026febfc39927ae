package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// newPodman is a podman on a private config (testutil.Podman) whose CNI
// plugins are the runtime env's and whose networks are conflists; every
// container it made goes when the test ends.
func newPodman(t *testing.T, cniBin string, conflists map[string][]byte) *testutil.Podman {
	t.Helper()
	for name := range conflists {
		forgetCNICache(t, name)
	}
	dir, err := os.MkdirTemp("", "ktrt-podman-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := testutil.NewPodman(dir, cniBin, conflists)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := p.Cleanup(ctx); err != nil {
			t.Errorf("podman cleanup: %v", err)
		}
	})
	return p
}

func mustPodman(t *testing.T, p *testutil.Podman, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := p.Run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// busyboxRootfs is a busybox root filesystem serving text at
// /www/index.html (testutil.BusyboxRootfs).
func busyboxRootfs(t *testing.T, text string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := testutil.BusyboxRootfs(root, text); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestPodman: podman runs a busybox container on a kurma-cni network with
// -p HOSTPORT:80 and --ip; the host reaches its httpd on 127.0.0.1:HOSTPORT
// (portMappings went from podman through kurma-cni and kurmad into the
// image's portmap); kurmad lists the pod as podman's, with the address
// asked for (podman's CNI_ARGS IP=, handed on to host-local); podman rm -f
// leaves no pod in kurmad, no veth, no IP lease and no portmap rule.
func TestPodman(t *testing.T) {
	r := newRuntimeEnv(t)
	const cniNet = "ktrtpodman"
	pm := newPodman(t, r.cniBin, map[string][]byte{cniNet: r.conflist("1.0.0", cniNet)})
	root := busyboxRootfs(t, "served through kurma")
	port := freePort(t)
	name := fmt.Sprintf("ktrt-web-%d", port)
	id := mustPodman(t, pm, "run", "-d", "--name", name, "--network", cniNet, "-p", fmt.Sprintf("%d:80", port), "--ip", "10.217.9.9",
		"--rootfs", root, "/bin/httpd", "-f", "-p", "80", "-h", "/www")
	getPage(t, port, "served through kurma")

	pods := r.listPods()
	if len(pods) != 1 || pods[0].Runtime == nil || pods[0].Runtime.Owner != "podman" || pods[0].Runtime.ContainerID != id || pods[0].Name != name {
		t.Fatalf("kurmad's pods %+v, want podman's %s named %s", pods, id, name)
	}
	if ips := podIPs(t, &pods[0]); ips[rtNetwork] != "10.217.9.9" {
		t.Errorf("address %s, want --ip's 10.217.9.9", ips[rtNetwork])
	}
	if out := r.mustCtl("pod", "ls"); !strings.Contains(out, "podman/"+id[:12]) {
		t.Errorf("pod ls lacks podman/%s:\n%s", id[:12], out)
	}
	var inspect []struct {
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress string }
		}
	}
	if err := json.Unmarshal([]byte(mustPodman(t, pm, "inspect", name)), &inspect); err != nil || len(inspect) != 1 ||
		inspect[0].NetworkSettings.Networks[cniNet].IPAddress != "10.217.9.9" {
		t.Errorf("podman inspect: %+v (%v), want the address kurma-cni returned", inspect, err)
	}

	mustPodman(t, pm, "rm", "-f", "-t", "0", name)
	r.checkNoPods(t)
	if portRule(t, port) {
		t.Errorf("a rule for port %d is left after podman rm", port)
	}
}

// runWeb runs a busybox httpd container serving text on network cniNet,
// published on a free host port, and returns its name and the port once
// the page answers there.
func runWeb(t *testing.T, pm *testutil.Podman, cniNet, text string, extra ...string) (string, int) {
	t.Helper()
	port := freePort(t)
	name := fmt.Sprintf("ktrt-web-%d", port)
	args := append([]string{"run", "-d", "--name", name, "--network", cniNet, "-p", fmt.Sprintf("%d:80", port)}, extra...)
	mustPodman(t, pm, append(args, "--rootfs", busyboxRootfs(t, text), "/bin/httpd", "-f", "-p", "80", "-h", "/www")...)
	getPage(t, port, text)
	return name, port
}

// TestPodmanDropped: kurmad stopped, `podman rm -f` (kurma-cni's DEL
// answers 11; podman removes the container and its netns anyway), kurmad
// started: within the check interval the pod, its veth, its lease and its
// port rules are gone, released through the plugins' del, and counted.
func TestPodmanDropped(t *testing.T) {
	f := newFaultEnv(t)
	const cniNet = "ktrtpmdrop"
	pm := newPodman(t, f.cniBin, map[string][]byte{cniNet: f.exampleConflist(t, "podman", cniNet, nil)})
	name, port := runWeb(t, pm, cniNet, "dropped while kurmad was away")
	if pods := f.listPods(); len(pods) != 1 {
		t.Fatalf("kurmad holds %d pods, want podman's", len(pods))
	}

	f.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := pm.Run(ctx, "rm", "-f", "-t", "0", name); err != nil {
		t.Logf("podman rm with kurmad stopped: %v (%s)", err, out)
	}
	if out, err := pm.Run(ctx, "ps", "-aq"); err != nil || out != "" {
		t.Fatalf("podman still has containers %q (%v): it kept the one whose DEL failed", out, err)
	}
	if !portRule(t, port) {
		t.Fatal("the port rule is gone before kurmad ran again: nothing for kurmad to release")
	}

	f.start()
	f.waitReleased(t, port)
	if got := f.counter(t, `kurma_runtime_pods_dropped_total{reason="netns_gone"}`); got != 1 {
		t.Errorf("releases counted: %v, want 1", got)
	}
}

// TestPodmanRebound: kurmad stopped, its bind mount of a live podman
// container's namespace removed, kurmad started: the pod is adopted and
// bound again (counted), the container keeps its address and its
// published port answers; `podman rm` then leaves nothing.
func TestPodmanRebound(t *testing.T) {
	f := newFaultEnv(t)
	const cniNet = "ktrtpmbind"
	pm := newPodman(t, f.cniBin, map[string][]byte{cniNet: f.exampleConflist(t, "podman", cniNet, nil)})
	name, port := runWeb(t, pm, cniNet, "kept through a lost bind mount", "--ip", "10.217.9.19")
	pods := f.listPods()
	if len(pods) != 1 || pods[0].Runtime == nil {
		t.Fatalf("kurmad's pods %+v, want podman's", pods)
	}
	p := pods[0]

	f.stop()
	if err := unix.Unmount(p.Netns, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if netnsfile.IsMounted(p.Netns) {
		t.Fatalf("%s is still mounted", p.Netns)
	}
	f.start()

	if got := f.listPods(); len(got) != 1 || got[0].ID != p.ID {
		t.Fatalf("after the restart kurmad holds %+v, want %s adopted", got, p.ID)
	}
	if !netnsfile.IsMounted(p.Netns) {
		t.Errorf("%s is not bound again", p.Netns)
	}
	if ips := testutil.IPv4In(t, p.Runtime.Netns, "eth0"); !testutil.HasIP(ips, net.ParseIP("10.217.9.19")) {
		t.Errorf("the container's eth0 has %v, want its 10.217.9.19", ips)
	}
	getPage(t, port, "kept through a lost bind mount")
	if got := f.counter(t, `kurma_runtime_pods_rebound_total`); got != 1 {
		t.Errorf("rebinds counted: %v, want 1", got)
	}
	if leases := f.PodObjects(nil).Leases; len(leases) != 1 {
		t.Errorf("leases %v, want the container's", leases)
	}

	mustPodman(t, pm, "rm", "-f", "-t", "0", name)
	f.checkNoPods(t)
	if portRule(t, port) {
		t.Errorf("a rule for port %d is left after podman rm", port)
	}
}

// TestPodmanIPOnItsNetwork: podman's --ip reaches kurma-cni as CNI_ARGS
// IP=, for the interface podman names (eth0): on a conflist whose
// kurma-cni attaches rtnet then rtnet2, rtnet (eth0) gets the address and
// rtnet2 one of its own range; handed to both, rtnet2's host-local refused
// an address outside it and the container did not start.
func TestPodmanIPOnItsNetwork(t *testing.T) {
	r := newTwoNetworkEnv(t)
	const cniNet = "ktrtpodip"
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": cniNet,
		"plugins": []map[string]any{{"type": "kurma-cni", "network": []string{rtNetwork, rt2Network}, "socket": r.Socket}}})
	if err != nil {
		t.Fatal(err)
	}
	pm := newPodman(t, r.cniBin, map[string][]byte{cniNet: b})
	name := "ktrt-podip"
	mustPodman(t, pm, "run", "-d", "--name", name, "--network", cniNet, "--ip", "10.217.9.29",
		"--rootfs", busyboxRootfs(t, "ip"), "/bin/httpd", "-f", "-p", "80", "-h", "/www")
	pods := r.listPods()
	if len(pods) != 1 {
		t.Fatalf("kurmad's pods %+v, want podman's one", pods)
	}
	ips := podIPs(t, &pods[0])
	_, sub2, _ := net.ParseCIDR(rt2Subnet)
	if ips[rtNetwork] != "10.217.9.29" || !sub2.Contains(net.ParseIP(ips[rt2Network])) {
		t.Errorf("addresses %v, want --ip's 10.217.9.29 on %s and one of %s on %s", ips, rtNetwork, rt2Subnet, rt2Network)
	}
	for _, a := range pods[0].Attachments {
		if a.Network == rtNetwork && a.Interface != "eth0" {
			t.Errorf("%s's interface %s, want podman's eth0", rtNetwork, a.Interface)
		}
	}
	mustPodman(t, pm, "rm", "-f", "-t", "0", name)
	r.checkNoPods(t)
}
