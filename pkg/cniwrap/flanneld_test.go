package cniwrap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/cniwrap"
)

// The main executable of the flannel image with the real flanneld: it runs
// in a "node", a network namespace whose kt-wflan1 (10.203.0.2) is a veth
// to the test's kt-wflan0 (10.203.0.1), where testutil.KubeAPI answers for
// the Node "ktnode" (pod CIDR 10.202.7.0/24) as flanneld's kube subnet
// manager asks. Everything flanneld makes (flannel.1, its nftables tables,
// routes) is in the node's namespace, removed with it.
const (
	flanHostLink = "kt-wflan0"
	flanNodeLink = "kt-wflan1"
)

type flannelNode struct {
	f      *fixture
	ns     string // the node's netns file
	api    *testutil.KubeAPI
	cache  string // the network's plugin state dir (/var/lib/cni), shared by its mains
	config []byte
}

func newFlannelNode(t *testing.T) *flannelNode {
	testutil.RequireRoot(t)
	f := newFixture(t)
	n := &flannelNode{f: f, cache: filepath.Join(t.TempDir(), "state")}
	n.ns = testutil.NewNodeNetns(t, filepath.Join(f.nsDir, "ktwnode"), testutil.NodeLink{
		Host: flanHostLink, HostAddrs: []string{"10.203.0.1/30"}, Name: flanNodeLink, Addrs: []string{"10.203.0.2/30"}})
	lis, err := net.Listen("tcp", "10.203.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.api = testutil.NewKubeAPI(t, lis, false, map[string]any{
		"metadata": map[string]any{"name": "ktnode", "annotations": map[string]any{}},
		"spec":     map[string]any{"podCIDR": "10.202.7.0/24", "podCIDRs": []any{"10.202.7.0/24"}},
		"status":   map[string]any{"addresses": []any{map[string]any{"type": "InternalIP", "address": "10.203.0.2"}}},
	})
	n.config = fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"ktwflan",
		"flannel":{"network":"10.202.0.0/16","backend":{"type":"vxlan"},"iface":%q},
		"plugins":[{"type":"flannel","delegate":{"bridge":%q,"isDefaultGateway":true},"ipam":{"dataDir":%q}}]}`,
		flanNodeLink, testBridge, f.ipamDir)
	return n
}

// setup starts the image's main in the node (its own flannel dir, the
// network's shared state dir) and waits for want on its stderr.
func (n *flannelNode) setup(t *testing.T, want string, env ...string) (*exec.Cmd, *testutil.SyncBuffer, <-chan error) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+n.ns, filepath.Join(n.f.bin, "setup"))
	cmd.Stdin = bytes.NewReader(n.config)
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CNI_PATH=" + n.f.cniPath,
		cniwrap.EnvCacheDir + "=" + n.cache, cniwrap.EnvFlannelDir + "=" + t.TempDir(),
		cniwrap.EnvFlanneld + "=" + testutil.Flanneld(t),
		"NODE_NAME=ktnode", "FLANNELD_KUBE_API_URL=" + n.api.URL}, env...)
	stderr, done := testutil.StartUntil(t, cmd, want, time.Minute)
	return cmd, stderr, done
}

// stop sends SIGTERM and waits for the main's exit.
func stop(t *testing.T, cmd *exec.Cmd, done <-chan error) error {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the main did not exit within 30s of SIGTERM")
		return nil
	}
}

// inNode runs a command in the node's network namespace.
func (n *flannelNode) inNode(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + n.ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (n *flannelNode) hasLink(t *testing.T, name string) bool {
	t.Helper()
	return strings.Contains(n.inNode(t, "ip", "-o", "link", "show"), ": "+name+":")
}

func (n *flannelNode) nftTables(t *testing.T) string {
	return n.inNode(t, "nft", "list", "tables")
}

// TestFlanneldMain: the main runs the real flanneld from the network's
// "flannel" object: it says ready once flanneld took the node's lease
// (subnet.env: the node's pod CIDR, the vxlan MTU), flanneld annotated the
// node and marked its network available, and made flannel.1; a pod added
// then gets an address in the node's subnet at that MTU. SIGTERM stops
// flanneld and the main cleanly (exit 0); while a pod holds an address, or
// another main of the network runs, flannel.1 and flannel's nftables
// tables stay; the last main to stop with no pod left removes them.
// flanneld dying is the main failing (exit 1, flanneld's reason); a
// flanneld that cannot reach the cluster fails at once.
func TestFlanneldMain(t *testing.T) {
	n := newFlannelNode(t)
	cmd, stderr, done := n.setup(t, "ready: flanneld wrote subnet.env")
	if !strings.Contains(stderr.String(), "subnet=10.202.7.0/24") || !strings.Contains(stderr.String(), "mtu=1450") {
		t.Errorf("ready line without the node's subnet and the vxlan MTU:\n%s", stderr)
	}
	if !n.hasLink(t, "flannel.1") {
		t.Error("flanneld made no flannel.1 in the node")
	}
	node := n.api.Node()
	ann, _ := node["metadata"].(map[string]any)["annotations"].(map[string]any)
	if ann["flannel.alpha.coreos.com/backend-type"] != "vxlan" || ann["flannel.alpha.coreos.com/public-ip"] != "10.203.0.2" {
		t.Errorf("flannel's annotations on the node: %v", ann)
	}
	if conds := fmt.Sprint(node["status"].(map[string]any)["conditions"]); !strings.Contains(conds, "FlannelIsUp") {
		t.Errorf("the node's conditions: %s, want NetworkUnavailable false (FlannelIsUp)", conds)
	}

	// A pod on it, through the wrapper, in the node's namespace.
	pod := n.f.netns("flanpod")
	uuid := "6d1f9a3c-0000-4000-8000-00000000f1a1"
	n.f.wrap = []string{"nsenter", "--net=" + n.ns}
	n.f.env = append(n.f.env, cniwrap.EnvFlannelDir+"="+flannelDirOf(t, cmd))
	res := parseResult(t, n.f.mustRun("add", n.config, pod, uuid, "eth0").stdout, "1.0.0")
	if _, sn, _ := net.ParseCIDR("10.202.7.0/24"); !sn.Contains(res.IPs[0].Address.IP) {
		t.Errorf("the pod's address %s is not in the node's pod CIDR", res.IPs[0].Address.IP)
	}
	if mtu, _ := podLink(t, pod, "eth0"); mtu != 1450 {
		t.Errorf("the pod's MTU %d, want flanneld's 1450", mtu)
	}

	if err := stop(t, cmd, done); err != nil {
		t.Fatalf("main after SIGTERM: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "flanneld stopped") || !strings.Contains(stderr.String(), "pods still hold addresses") {
		t.Errorf("stop with a pod attached:\n%s", stderr)
	}
	if !n.hasLink(t, "flannel.1") || !strings.Contains(n.nftTables(t), "flannel-ipv4") {
		t.Error("flannel.1 or flannel's nftables table went while a pod holds an address")
	}
	n.f.mustRun("del", n.config, pod, uuid, "eth0")

	// flanneld killed: the main fails with flanneld's end as its reason.
	cmd, stderr, done = n.setup(t, "ready: flanneld wrote subnet.env")
	flanneld := testutil.ChildNamed(t, cmd.Process.Pid, "flanneld")
	if err := syscall.Kill(flanneld, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code := exitCode(err); code != 1 || !strings.Contains(stderr.String(), "flanneld exited (signal: killed)") {
			t.Errorf("main after flanneld was killed: exit %d (%v)\n%s", code, err, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the main did not fail when flanneld died")
	}
	if !n.hasLink(t, "flannel.1") {
		t.Error("a failed main removed flannel.1: the restarted one would leave other nodes unreachable meanwhile")
	}

	// Two mains of the network (an old generation and a new one): the
	// first to stop leaves everything to the other; the last removes it.
	a, aerr, adone := n.setup(t, "ready: flanneld wrote subnet.env")
	b, berr, bdone := n.setup(t, "ready: flanneld wrote subnet.env")
	if err := stop(t, a, adone); err != nil || !strings.Contains(aerr.String(), "another generation of this network runs flanneld") {
		t.Errorf("first main stopping: %v\n%s", err, aerr)
	}
	if !n.hasLink(t, "flannel.1") {
		t.Fatal("flannel.1 went while another main runs")
	}
	if err := stop(t, b, bdone); err != nil || !strings.Contains(berr.String(), "removed flannel's links, routes and rules") {
		t.Errorf("last main stopping: %v\n%s", err, berr)
	}
	if n.hasLink(t, "flannel.1") || strings.Contains(n.nftTables(t), "flannel") {
		t.Errorf("after the last main stopped with no pod: links\n%s\ntables\n%s", n.inNode(t, "ip", "-o", "link"), n.nftTables(t))
	}

	// No way to the cluster: flanneld fails at once, and so does the main.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd = exec.CommandContext(ctx, "nsenter", "--net="+n.ns, filepath.Join(n.f.bin, "setup"))
	cmd.Stdin = bytes.NewReader(n.config)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CNI_PATH=" + n.f.cniPath, cniwrap.EnvCacheDir + "=" + n.cache,
		cniwrap.EnvFlannelDir + "=" + t.TempDir(), cniwrap.EnvFlanneld + "=" + testutil.Flanneld(t), "NODE_NAME=ktnode"}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err := cmd.Run()
	if exitCode(err) != 1 || !strings.Contains(errOut.String(), "flanneld exited (exit status 1)") || !strings.Contains(errOut.String(), "SubnetManager") {
		t.Errorf("main without cluster access: %v\n%s", err, errOut.String())
	}
}

// flannelDirOf is the flannel dir the main cmd was started with.
func flannelDirOf(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	for _, kv := range cmd.Env {
		if v, ok := strings.CutPrefix(kv, cniwrap.EnvFlannelDir+"="); ok {
			return v
		}
	}
	t.Fatal("no flannel dir in the main's environment")
	return ""
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}
