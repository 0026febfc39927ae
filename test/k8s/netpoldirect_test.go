package k8stest

// TestNetpolDirect is `make k8s-netpol-test`: kurma-netpol run directly on
// the node (not in kurma's image), with the admin kubeconfig, on a
// single-node cluster whose own CNI is the reference plugins (bridge and
// host-local): the baseline the NetworkPolicy conformance runs compare
// kurma with. It needs plugins/netpol/out/kurma-netpol (make netpol),
// images/out/bin's bridge, host-local and loopback (make images) and the
// kube binary (make k8s-build).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	netpolBridge    = "kt-np0"
	netpolConflist  = "/etc/cni/net.d/10-podnet.conflist"
	netpolComponent = "kurma-netpol"
	serverPort      = 8080
)

// netpolWorkloads: a server (busybox httpd) and two clients, one labelled
// for the allow-from-label policy.
var netpolWorkloads = fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: server}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - {name: httpd, image: %[1]s, command: ["/bin/sh", "-c", "echo ok > /www/index.html && exec httpd -f -p %[2]d -h /www"]}
---
apiVersion: v1
kind: Pod
metadata: {name: client-allowed, labels: {role: allowed}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - {name: client, image: %[1]s, command: ["/bin/sleep", "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: client-other, labels: {role: other}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - {name: client, image: %[1]s, command: ["/bin/sleep", "3600"]}
`, BusyboxImage, serverPort)

// TestNetpolDirect: with no policy both clients reach the server; a
// default-deny ingress policy on the server refuses new connections from
// both (and from a host process of another user than root, while the
// host's root, kubelet's probes, still connects); an allow-from-label
// policy lets the labelled client in and keeps the other out. A second
// daemon started beside the first (a new generation) gets a table of its
// own and waits for the queue while the first enforces; the first stopped,
// the second enforces; the second killed, its table stays and drops
// (fail-closed) until a third daemon removes it and enforces. Deleting
// both policies lets both clients in. The times from each API call to the
// first connection that shows it (refused or accepted) are measured by
// connecting every 10 ms from the clients' network namespaces. No daemon
// crashes (a packet of an address no pod has, the host's, crashed
// kube-network-policies v0.8.0 with NRI disabled) or logs the library's
// own-table errors; on SIGTERM each exits 0 and removes its table.
func TestNetpolDirect(t *testing.T) {
	if nodes, _ := NodesFromEnv(); nodes != 1 {
		t.Skipf("%s=%d: this is a single-node test", NodesEnv, nodes)
	}
	s := &stepper{t: t, start: time.Now()}
	ctx := context.Background()
	root := repo(t)
	daemon := need(t, filepath.Join(root, "plugins/netpol/out/kurma-netpol"), "make netpol")
	var plugins []string
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		plugins = append(plugins, need(t, filepath.Join(root, "images/out/bin", p), "make images"))
	}
	c := startPlain(t, plugins)

	s.step("the node's CNI: bridge %s and host-local on %s", netpolBridge, c.PodCIDR)
	conflist := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "podnet", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
`, netpolBridge, c.PodCIDR)
	if err := os.WriteFile(netpolConflist, []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the node to be Ready (network ready)", func() error {
		if ready, msg := nodeReady(t, c); !ready {
			return errors.New(msg)
		}
		return nil
	})

	s.step("kurma-netpol on the node, policing podnet with the admin kubeconfig")
	np := &netpolRun{t: t, c: c, bin: daemon, dir: t.TempDir()}
	first := np.start("kurma-netpol")
	first.waitReady()
	tables := netpolTables(t)
	if len(tables) != 1 {
		t.Fatalf("kurma-netpol is ready with tables %v: nft list tables:\n%s", tables, nftList(t))
	}

	s.step("a server and two clients")
	applyYAML(t, c, netpolWorkloads)
	for _, p := range []string{"server", "client-allowed", "client-other"} {
		if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "pod/"+p, "--timeout=3m"); err != nil {
			t.Fatal(err)
		}
	}
	ips := podsByName(t, c, "app=server")
	serverIP := ips["server"]
	server := net.JoinHostPort(serverIP, fmt.Sprint(serverPort))
	clients := map[string]string{}
	for name, ip := range podsByName(t, c, "role") {
		clients[name] = podNetns(t, ip)
	}
	allowed, other := clients["client-allowed"], clients["client-other"]
	if allowed == "" || other == "" {
		t.Fatalf("clients' network namespaces: %v", clients)
	}

	s.step("no policy: both clients connect")
	for name, ns := range clients {
		if err := dialFrom(ns, server, 2*time.Second); err != nil {
			t.Fatalf("%s → server without any policy: %v", name, err)
		}
	}
	wantWget(t, c, "client-allowed", server, true)

	client := netpolClient(t, c)
	policies := client.NetworkingV1().NetworkPolicies("default")
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-ingress"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	allow := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-from-allowed"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "allowed"}}}}}}}}

	s.step("default-deny ingress on the server")
	refusedAfter := measure(t, other, server, false, func() error {
		_, err := policies.Create(ctx, deny, metav1.CreateOptions{})
		return err
	})
	t.Logf("MEASURED apply default-deny → first refused connection: %.1f ms", ms(refusedAfter))
	if err := dialFrom(allowed, server, refusedDial); err == nil {
		t.Error("client-allowed connected under default-deny")
	}
	wantWget(t, c, "client-other", server, false)
	if err := hostDial(t, server, 65534); err == nil {
		t.Error("a host process of uid 65534 connected under default-deny")
	}
	if err := hostDial(t, server, 0); err != nil {
		t.Errorf("the host's root (kubelet's probes) is refused under default-deny: %v", err)
	}

	s.step("allow ingress from role=allowed")
	acceptedAfter := measure(t, allowed, server, true, func() error {
		_, err := policies.Create(ctx, allow, metav1.CreateOptions{})
		return err
	})
	t.Logf("MEASURED apply allow-from-label → first accepted connection: %.1f ms", ms(acceptedAfter))
	if err := dialFrom(other, server, refusedDial); err == nil {
		t.Error("client-other connected with only role=allowed allowed")
	}
	wantWget(t, c, "client-allowed", server, true)
	wantWget(t, c, "client-other", server, false)

	s.step("a second kurma-netpol beside the first, as a new generation starts beside the old")
	second := np.start("kurma-netpol-2")
	second.waitReady()
	second.waitLog("waiting for the queue")
	if got := netpolTables(t); len(got) != 2 || !slices.Contains(got, tables[0]) {
		t.Fatalf("tables with two daemons: %v, want the first's %s and one more", got, tables[0])
	}
	wantAllowOnly(t, allowed, other, server, "two daemons, the first on the queue")

	s.step("the first stops: the second takes the queue")
	first.stop()
	if got := netpolTables(t); len(got) != 1 || got[0] == tables[0] {
		t.Fatalf("tables once the first stopped: %v, want the second's alone", got)
	}
	second.waitLog("Starting controller")
	wantAllowOnly(t, allowed, other, server, "the second on the queue")

	s.step("the second is killed: its table stays, dropping (fail-closed)")
	secondTable := netpolTables(t)[0]
	second.kill()
	if got := netpolTables(t); !slices.Equal(got, []string{secondTable}) {
		t.Fatalf("tables once the second was killed: %v, want its %s left", got, secondTable)
	}
	if err := dialFrom(allowed, server, refusedDial); err == nil {
		t.Error("client-allowed connected with no daemon on the queue, fail-closed")
	}

	s.step("a third kurma-netpol removes the dead one's table and enforces")
	third := np.start("kurma-netpol-3")
	third.waitReady()
	third.waitLog("removed tables left by daemons that died")
	if got := netpolTables(t); len(got) != 1 || got[0] == secondTable {
		t.Fatalf("tables with the third: %v, want its own alone", got)
	}
	third.waitLog("Starting controller")
	wantAllowOnly(t, allowed, other, server, "the third on the queue")

	s.step("delete both policies")
	deletedAfter := measure(t, other, server, true, func() error {
		return errors.Join(policies.Delete(ctx, deny.Name, metav1.DeleteOptions{}), policies.Delete(ctx, allow.Name, metav1.DeleteOptions{}))
	})
	t.Logf("MEASURED delete policies → first accepted connection: %.1f ms", ms(deletedAfter))
	if err := dialFrom(allowed, server, 2*time.Second); err != nil {
		t.Errorf("client-allowed → server with no policy left: %v", err)
	}
	wantWget(t, c, "client-other", server, true)
	if err := hostDial(t, server, 65534); err != nil {
		t.Errorf("a host process of uid 65534 → server with no policy left: %v", err)
	}

	s.step("the daemons' logs, then SIGTERM")
	for _, r := range []*netpolDaemon{first, second, third} {
		r.checkLog()
	}
	third.stop()
	if got := netpolTables(t); len(got) != 0 {
		t.Errorf("tables left after SIGTERM: %v", got)
	}

	s.step("delete the workloads")
	if _, err := c.Kubectl(ctx, "delete", "pod", "server", "client-allowed", "client-other", "--wait", "--timeout=2m"); err != nil {
		t.Error(err)
	}
	// The containers, whose rootfs mounts are in this process's mount
	// namespace (the node's), must be gone before the teardown removes
	// their directories.
	waitFor(t, 2*time.Minute, "the pods' containers to be gone", func() error {
		out, err := c.Ctr(ctx, "tasks", "ls", "-q")
		if err != nil {
			return err
		}
		if ids := strings.Fields(out); len(ids) > 0 {
			return fmt.Errorf("tasks %v", ids)
		}
		return nil
	})
}

// netpolRun starts kurma-netpol daemons on the cluster's node.
type netpolRun struct {
	t   *testing.T
	c   *Cluster
	bin string
	dir string
}

// netpolDaemon is one kurma-netpol started by netpolRun.
type netpolDaemon struct {
	t         *testing.T
	node      *Node
	component string
	ready     string
	d         *daemon
	started   time.Time
}

// start starts kurma-netpol as the node's daemon component, policing
// podnet.
func (r *netpolRun) start(component string) *netpolDaemon {
	t := r.t
	t.Helper()
	config := filepath.Join(r.dir, "netpol.json")
	if err := os.WriteFile(config, []byte(`{"name": "netpol", "policy_networks": ["podnet"], "cluster_network": "podnet"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	node := r.c.Nodes[0]
	n := &netpolDaemon{t: t, node: node, component: component, ready: filepath.Join(r.dir, component+".ready"), started: time.Now()}
	if err := node.RunDaemon(component, nil, r.bin, "--config", config, "--kubeconfig", r.c.Kubeconfig,
		"--node-name", node.Name, "--ready-file", n.ready, "--log-level", "debug"); err != nil {
		t.Fatal(err)
	}
	n.d = r.c.daemon(node.daemonName(component))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log (last 40 lines):\n%s", component, node.Log(component, 40))
		}
	})
	return n
}

// waitReady waits for the daemon's readiness file; the daemon must keep
// running meanwhile.
func (n *netpolDaemon) waitReady() {
	n.t.Helper()
	waitFor(n.t, time.Minute, n.component+"'s readiness file", func() error {
		if !n.d.running() {
			n.t.Fatalf("%s exited: %v\n%s", n.component, n.d.err, n.d.tail(30))
		}
		_, err := os.Stat(n.ready)
		return err
	})
	n.t.Logf("%s ready %s after its start", n.component, time.Since(n.started).Round(time.Millisecond))
}

// waitLog waits until the daemon has logged a line with text.
func (n *netpolDaemon) waitLog(text string) {
	n.t.Helper()
	waitFor(n.t, time.Minute, fmt.Sprintf("%s logging %q", n.component, text), func() error {
		if !n.d.running() {
			n.t.Fatalf("%s exited: %v\n%s", n.component, n.d.err, n.d.tail(30))
		}
		if b, _ := os.ReadFile(n.node.LogPath(n.component)); !strings.Contains(string(b), text) {
			return errors.New("not yet")
		}
		return nil
	})
}

// stop sends SIGTERM: the daemon exits 0 without its readiness file.
func (n *netpolDaemon) stop() {
	n.t.Helper()
	if err := n.node.StopDaemon(n.component, 10*time.Second); err != nil {
		n.t.Fatal(err)
	}
	if n.d.err != nil {
		n.t.Errorf("%s on SIGTERM: %v, want exit 0\n%s", n.component, n.d.err, n.d.tail(20))
	}
	if _, err := os.Stat(n.ready); !errors.Is(err, os.ErrNotExist) {
		n.t.Errorf("%s's readiness file after SIGTERM: %v", n.component, err)
	}
}

// kill kills the daemon as a crash would.
func (n *netpolDaemon) kill() {
	n.t.Helper()
	_ = n.d.cmd.Process.Kill()
	<-n.d.done
}

// checkLog checks the daemon logged no panic, no error and none of the
// library's own-table errors, and said why it does not use that table.
func (n *netpolDaemon) checkLog() {
	n.t.Helper()
	b, err := os.ReadFile(n.node.LogPath(n.component))
	if err != nil {
		n.t.Fatal(err)
	}
	for _, bad := range []string{"panic", "msg=syncing ", "Dropping out of the queue", "level=error", "level=fatal"} {
		if strings.Contains(string(b), bad) {
			n.t.Errorf("%s's log has %q", n.component, bad)
		}
	}
	for _, want := range []string{"xtables NFQUEUE target", "kube-network-policies' own nftables table is not used"} {
		if !strings.Contains(string(b), want) {
			n.t.Errorf("%s's log lacks %q", n.component, want)
		}
	}
}

// wantAllowOnly checks that, new connections from client-allowed's
// network namespace to addr open and those from client-other's do not.
func wantAllowOnly(t *testing.T, allowed, other, addr, when string) {
	t.Helper()
	if err := dialFrom(allowed, addr, 2*time.Second); err != nil {
		t.Errorf("%s: client-allowed → server: %v", when, err)
	}
	if err := dialFrom(other, addr, refusedDial); err == nil {
		t.Errorf("%s: client-other connected", when)
	}
}

// startPlain starts the single-node cluster with plugins in the node's CNI
// bin dir and no image of kurma's, torn down when the test ends.
func startPlain(t *testing.T, plugins []string) *Cluster {
	t.Helper()
	kube := os.Getenv("KURMA_K8S_KUBE")
	if kube == "" {
		kube = "out/kube"
	}
	kube, _ = filepath.Abs(kube)
	need(t, kube, "make k8s-build")
	moduleDir, _ := filepath.Abs(".")
	start := time.Now()
	c, err := Start(context.Background(), Options{Kube: kube, ModuleDir: moduleDir, CNIPlugins: plugins,
		Logf: func(f string, a ...any) { t.Logf("[%5.1fs] "+f, append([]any{time.Since(start).Seconds()}, a...)...) },
		Keep: os.Getenv("KURMA_K8S_KEEP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet's log (last 40 lines):\n%s", c.Nodes[0].Log("kubelet", 40))
		}
		if err := c.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	return c
}

func netpolClient(t *testing.T, c *Cluster) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func nftList(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v: %s", err, out)
	}
	return string(out)
}

// netpolTables are kurma-netpol's tables ("inet kurma-netpol-netpol-...").
func netpolTables(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(nftList(t), "\n") {
		if strings.HasPrefix(l, "table inet kurma-netpol-") {
			out = append(out, strings.TrimPrefix(l, "table "))
		}
	}
	return out
}

// podNetns is the network namespace file (containerd's, /var/run/netns)
// of the pod with address ip.
func podNetns(t *testing.T, ip string) string {
	t.Helper()
	files, _ := filepath.Glob("/var/run/netns/*")
	for _, f := range files {
		out, err := exec.Command("nsenter", "--net="+f, "ip", "-o", "addr", "show").CombinedOutput()
		if err == nil && strings.Contains(string(out), " "+ip+"/") {
			return f
		}
	}
	t.Fatalf("no network namespace in /var/run/netns has %s", ip)
	return ""
}

// refusedDial is how long a connection that must not open is given: its
// SYN is dropped, so the dial fails only at this limit.
const refusedDial = 500 * time.Millisecond

// dialFrom connects from network namespace ns to addr, then closes.
func dialFrom(ns, addr string, limit time.Duration) error {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	target, err := os.Open(ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering %s: %w", ns, err)
	}
	conn, derr := net.DialTimeout("tcp", addr, limit)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in the pod's namespace: leave it locked, so it
		// ends with this goroutine.
		return fmt.Errorf("leaving %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	if derr != nil {
		return derr
	}
	return conn.Close()
}

// hostDial fetches from addr as a host process of uid (busybox wget, killed
// after 2 seconds: this busybox's wget -T crashes).
func hostDial(t *testing.T, addr string, uid uint32) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "busybox", "wget", "-q", "-O", "/dev/null", "http://"+addr+"/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if out, err := runCmd(cmd); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// wantWget checks that pod's own process (busybox wget, through kubectl
// exec, 2 seconds at most) reaches addr, or not.
func wantWget(t *testing.T, c *Cluster, pod, addr string, reach bool) {
	t.Helper()
	_, err := c.Kubectl(context.Background(), "exec", pod, "--", "timeout", "2", "wget", "-q", "-O", "/dev/null", "http://"+addr+"/")
	if reach && err != nil {
		t.Errorf("%s cannot reach %s: %v", pod, addr, err)
	}
	if !reach && err == nil {
		t.Errorf("%s reaches %s", pod, addr)
	}
}

// attempt is one connection of measure's.
type attempt struct {
	start time.Time
	ok    bool
}

// measure calls change, connecting from network namespace ns to addr
// every 10 ms (each connection given refusedDial) from just before it,
// until the last 10 connections, in the order they started, all end as
// want (accepted or refused) with every earlier one ended too. It returns
// the time from change's call to the start of the first connection of
// that final run.
func measure(t *testing.T, ns, addr string, want bool, change func() error) time.Duration {
	t.Helper()
	const run = 10
	var mu sync.Mutex
	var attempts []*attempt
	done := map[*attempt]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			a := &attempt{start: time.Now()}
			mu.Lock()
			attempts = append(attempts, a)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := dialFrom(ns, addr, refusedDial)
				mu.Lock()
				a.ok = err == nil
				done[a] = true
				mu.Unlock()
			}()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	changed := time.Now()
	if err := change(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		// The connections ended so far, in start order, up to the first
		// still running.
		var ended []*attempt
		for _, a := range attempts {
			if !done[a] {
				break
			}
			ended = append(ended, a)
		}
		first := -1
		for i := len(ended) - 1; i >= 0 && ended[i].ok == want && ended[i].start.After(changed); i-- {
			first = i
		}
		var result time.Duration
		found := first >= 0 && len(ended)-first >= run
		if found {
			result = ended[first].start.Sub(changed)
		}
		states := make([]bool, len(ended))
		for i, a := range ended {
			states[i] = a.ok
		}
		mu.Unlock()
		if found {
			return result
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections to %s never settled to accepted=%v within 30s: %v", addr, want, states)
		}
		time.Sleep(20 * time.Millisecond) // polling the connections' results
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
