package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/k8snode"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// The flannel image end to end on one node: kurmad runs in a network
// namespace of the test's, the "node" (eth0 10.206.0.2 and fd00:206::2, a
// veth to the test's kteflan0), on the config of the shipped
// kurma-flannel.yaml as kurma-node renders it for a dual-stack node, its
// podnet on images/out/flannel.aci. The Kubernetes API flanneld finds with
// kubernetes_credentials is testutil.KubeAPI, over TLS on the node's
// loopback, as a pod's in-cluster config names it. (make k8s-test runs the
// same manifest on a real cluster of two nodes.)

const flanHostVeth = "kteflan0"

// inNetns runs a command in the network namespace at path.
func inNetns(t *testing.T, path string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + path}, args...)...).CombinedOutput()
	return string(out), err
}

func TestFlannelImage(t *testing.T) {
	e := newEnv(t)
	node := testutil.NewNodeNetns(t, filepath.Join(t.TempDir(), "ktnode"), testutil.NodeLink{
		Host: flanHostVeth, Name: "eth0", Addrs: []string{"10.206.0.2/24", "fd00:206::2/64"}})

	kn := testNode()
	kn.Status.Addresses = []k8snode.NodeAddress{{Type: "InternalIP", Address: "10.206.0.2"}, {Type: "InternalIP", Address: "fd00:206::2"}}
	kapi := testutil.NewKubeAPI(t, testutil.ListenIn(t, node, "127.0.0.1:0"), true, map[string]any{
		"metadata": map[string]any{"name": kn.Metadata.Name, "annotations": map[string]any{}},
		"spec":     map[string]any{"podCIDR": kn.Spec.PodCIDR, "podCIDRs": kn.Spec.PodCIDRs},
		"status":   map[string]any{"addresses": []any{map[string]any{"type": "InternalIP", "address": "10.206.0.2"}}},
	})
	// podnet's own credentials, as kurma-node writes them (the test's
	// credentials root, KURMA_CREDENTIALS_DIR).
	creds := t.TempDir()
	sa := netplugin.CredentialsDir(creds, "podnet")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string][]byte{"token": []byte("kt-token"), "ca.crt": kapi.CA, "namespace": []byte("kurma-system")} {
		if err := os.WriteFile(filepath.Join(sa, f), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The shipped config, rendered for this dual-stack node, podnet's
	// image the one make images built.
	m := testutil.ReadManifest(t, filepath.Join(testutil.RepoRoot(), "deploy/kubernetes/flannel/kurma-flannel.yaml"))
	// kurma-node, in the node's namespace, finds eth0 holding its address.
	data := m.ConfigMapData(t, "kurmad-config")
	rendered, err := k8snode.ShippedConfig([]byte(data["kurmad.json"]), []byte(data["networks.yaml"]),
		k8snode.Input{Node: kn, ClusterCIDRs: []string{"10.244.0.0/16", "fd00:10:244::/56"},
			InterfaceOf: func(netip.Addr) (string, error) { return "eth0", nil }}, "/")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(rendered, &cfg); err != nil {
		t.Fatal(err)
	}
	// podnet alone: the policy network's image is not the flannel one.
	var nets []any
	for _, n := range cfg["pod_networks"].([]any) {
		if n.(map[string]any)["name"] == "podnet" {
			n.(map[string]any)["image"] = "file://" + testutil.BuiltImage(t, "flannel.aci")
			delete(n.(map[string]any), "network_policy")
			nets = append(nets, n)
		}
	}
	cfg["pod_networks"] = nets
	// registries_d is the ConfigMap's mount in kurma's container: here a
	// directory holding its registries.yaml.
	regd := t.TempDir()
	if err := os.WriteFile(filepath.Join(regd, "registries.yaml"), []byte(m.ConfigMapData(t, "kurmad-config")["registries.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg["registries_d"] = regd
	if err := e.WriteConfig(cfg); err != nil {
		t.Fatal(err)
	}
	e.networks = []string{"podnet"}
	e.Wrap = []string{"nsenter", "--net=" + node}
	e.start("KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT="+portOf(t, kapi.URL),
		"NODE_NAME="+kn.Metadata.Name, "KURMA_CREDENTIALS_DIR="+creds)

	// flanneld took the node's lease and made the overlay.
	if out, _ := inNetns(t, node, "ip", "-o", "link", "show", "flannel.1"); !strings.Contains(out, "vxlan") && !strings.Contains(out, "flannel.1") {
		t.Errorf("no flannel.1 in the node: %s", out)
	}
	ann := kapi.Node()["metadata"].(map[string]any)["annotations"].(map[string]any)
	if ann["flannel.alpha.coreos.com/backend-type"] != "vxlan" || ann["flannel.alpha.coreos.com/public-ip"] != "10.206.0.2" ||
		ann["flannel.alpha.coreos.com/public-ipv6"] != "fd00:206::2" {
		t.Errorf("flanneld's annotations of the node: %v", ann)
	}

	// Two pods: both families, the node's subnets, flannel's MTU, and
	// they reach each other.
	a, b := e.createPod("--name", "fa", "--net", "podnet"), e.createPod("--name", "fb", "--net", "podnet")
	ipsA, ipsB := attachmentIPs(t, a), attachmentIPs(t, b)
	for _, ips := range [][]net.IP{ipsA, ipsB} {
		if len(ips) != 2 || !inCIDR(ips[0], "10.244.1.0/24") || !inCIDR(ips[1], "fd00:10:244:1::/64") {
			t.Fatalf("pod addresses %v, want one in 10.244.1.0/24 and one in fd00:10:244:1::/64", ips)
		}
	}
	if out, _ := inNetns(t, a.Netns, "ip", "-o", "link", "show", "eth0"); !strings.Contains(out, "mtu 1450") {
		t.Errorf("pod eth0: %s, want flannel's mtu 1450", out)
	}
	for _, ip := range ipsB {
		ping(t, a.Netns, ip.String())
	}

	// flanneld dies: the network fails, is restarted with backoff, and
	// serves again; the pods keep their addresses and reach each other.
	var g api.Generation
	testutil.WaitFor(t, 10*time.Second, "podnet running", func() error { return e.networkIn("podnet", "running", &g) })
	flanneld := testutil.ChildNamed(t, g.Pid, "flanneld")
	if err := syscall.Kill(flanneld, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "podnet failed on flanneld's death", func() error {
		n, err := e.network("podnet")
		if err == nil && (n.Restarts == 0 && n.State != "failed") {
			return fmt.Errorf("podnet %s, restarts %d", n.State, n.Restarts)
		}
		return err
	})
	testutil.WaitFor(t, 60*time.Second, "podnet running again", func() error { return e.networkIn("podnet", "running", &g) })
	if g.Restarts == 0 {
		t.Errorf("podnet running again with %d restarts", g.Restarts)
	}
	if log := e.Log(); !strings.Contains(log, "flanneld exited (signal: killed)") {
		t.Errorf("kurmad's log does not say flanneld died")
	}
	ping(t, a.Netns, ipsB[0].String())

	// Pods gone, kurmad stopped: the last flanneld of the node leaves
	// nothing of flannel's.
	if err := e.RemoveAllPods(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.stop()
	if out, _ := inNetns(t, node, "ip", "-o", "link"); strings.Contains(out, "flannel") {
		t.Errorf("flannel's links after kurmad stopped with no pod: %s", out)
	}
	if out, _ := inNetns(t, node, "nft", "list", "tables"); strings.Contains(out, "flannel") {
		t.Errorf("flannel's nftables tables after kurmad stopped with no pod: %s", out)
	}
	if l, err := netlink.LinkByName(flanHostVeth); err == nil {
		_ = netlink.LinkDel(l) // the node's, not a pod's
	}
	e.checkCleanStopped()
}

func portOf(t *testing.T, url string) string {
	t.Helper()
	i := strings.LastIndexByte(url, ':')
	if _, err := strconv.Atoi(url[i+1:]); i < 0 || err != nil {
		t.Fatalf("no port in %s", url)
	}
	return url[i+1:]
}

// attachmentIPs are a pod's addresses on its first attachment, IPv4 first.
func attachmentIPs(t *testing.T, p *api.Pod) []net.IP {
	t.Helper()
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if len(p.Attachments) == 0 || json.Unmarshal(p.Attachments[0].Result, &res) != nil {
		t.Fatalf("pod %s: no result", p.Name)
	}
	var v4, v6 []net.IP
	for _, ip := range res.IPs {
		a, _, err := net.ParseCIDR(ip.Address)
		if err != nil {
			t.Fatal(err)
		}
		if a.To4() != nil {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	return append(v4, v6...)
}

func inCIDR(ip net.IP, cidr string) bool {
	_, n, _ := net.ParseCIDR(cidr)
	return n.Contains(ip)
}
