package k8stest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Node is one of the cluster's nodes: its containerd, kubelet and (N
// nodes) kube-proxy.
type Node struct {
	c    *Cluster
	Name string
	// IP is the node's IPv4 address (the single node's: the machine's);
	// IPv6 its IPv6 one, on a dual-stack cluster.
	IP, IPv6 string
	// Dir holds the node's files: its directories bound on the standard
	// paths, containerd's root, the kubelet's config.
	Dir        string
	Containerd string // containerd's socket
	// PodCIDRs are the Node's spec.podCIDRs.
	PodCIDRs []string
	// holder keeps the node's namespaces (N nodes); nil for the single
	// node, which runs in this program's.
	holder *holder
}

// IPs are the node's addresses, IPv4 first.
func (n *Node) IPs() []string {
	if n.IPv6 != "" {
		return []string{n.IP, n.IPv6}
	}
	return []string{n.IP}
}

// identity names the node's kubelet certificate in the cluster's PKI.
func (n *Node) identity() string { return "kubelet-" + n.Name }

// daemonName is component's name among the cluster's daemons.
func (n *Node) daemonName(component string) string {
	if n.holder == nil {
		return component
	}
	return n.Name + "/" + component
}

// Log is the tail of the node's component's log (containerd, kubelet,
// kube-proxy, or one run with RunDaemon).
func (n *Node) Log(component string, lines int) string {
	return n.c.Log(n.daemonName(component), lines)
}

// LogPath is the node's component's log file.
func (n *Node) LogPath(component string) string { return n.c.LogPath(n.daemonName(component)) }

// Command is name run on the node: in its cgroup and namespaces.
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	if n.holder == nil {
		return exec.Command(name, args...)
	}
	return n.holder.command(name, args...)
}

// Run runs name on the node and returns its combined output; an error
// carries the output.
func (n *Node) Run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := n.Command(name, args...)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			if cmd.Process != nil {
				_ = cmd.Process.Kill()
			}
		case <-done:
		}
	}()
	out, err := runCmd(cmd)
	if err != nil {
		return string(out), fmt.Errorf("node %s: %s %s: %v: %s", n.Name, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// RunDaemon starts name as a daemon of the node, logging to the
// cluster's logs; Close stops it before the node's kubelet.
func (n *Node) RunDaemon(component string, env []string, name string, args ...string) error {
	cmd := n.Command(name, args...)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, env...)
	return n.c.runDaemon(n.daemonName(component), cmd)
}

// StopDaemon stops the node's component (SIGTERM, SIGKILL after grace).
func (n *Node) StopDaemon(component string, grace time.Duration) error {
	d := n.c.daemon(n.daemonName(component))
	if d == nil {
		return fmt.Errorf("node %s: no %s", n.Name, component)
	}
	d.stop(grace)
	return nil
}

// Path is where this program finds path of the node's file system.
func (n *Node) Path(path string) string {
	if n.holder == nil {
		return path
	}
	return fmt.Sprintf("/proc/%d/root%s", n.holder.pid, path)
}

// makeNodes makes an N-node cluster's network and nodes: in this
// program's network namespace (the hub), the bridge the nodes' eth0s hang
// on; per node, its cgroup (below this program's, in every hierarchy),
// its holder with the node's namespaces and mounts, and its eth0.
func (c *Cluster) makeNodes() error {
	c.NodeIP = hubNet + "1"
	hub := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", hubBridge, "type", "bridge"},
		{"addr", "add", c.NodeIP + "/24", "dev", hubBridge},
		{"link", "set", hubBridge, "up"},
	}
	if c.opts.DualStack {
		hub = append(hub, []string{"-6", "addr", "add", hubNetv6 + "1/64", "dev", hubBridge, "nodad"})
	}
	for _, args := range hub {
		if out, err := runCmd(exec.Command("ip", args...)); err != nil {
			return fmt.Errorf("the hub's network: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	top := fmt.Sprintf("kurma-k8s-%d", os.Getpid())
	for _, h := range hs {
		c.cgroupDirs = append(c.cgroupDirs, filepath.Join(h.Own, top))
	}
	c.kernel.CgroupDirs = c.cgroupDirs
	if err := c.kernel.save(os.Getenv(stateEnv)); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return err
	}
	for i := 1; i <= c.opts.Nodes; i++ {
		n := &Node{c: c, Name: fmt.Sprintf("kt-node-%d", i), IP: hubNet + strconv.Itoa(i+1)}
		if c.opts.DualStack {
			n.IPv6 = hubNetv6 + strconv.Itoa(i+1)
		}
		n.Dir = filepath.Join(c.Dir, n.Name)
		c.Nodes = append(c.Nodes, n)
		if err := n.makeNamespaces(hs, top+"/"+n.Name); err != nil {
			return err
		}
	}
	return nil
}

// makeNamespaces starts the node's holder in cgroup (relative to this
// program's), with the node's files bound on the standard paths and a
// machine-id of its own, and gives it eth0 on the hub's bridge.
func (n *Node) makeNamespaces(hs []hierarchy, cgroup string) error {
	binds, err := n.c.nodeFiles(n.Dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat("/etc/machine-id"); err == nil {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		f := filepath.Join(n.Dir, "machine-id")
		if err := os.WriteFile(f, []byte(hex.EncodeToString(id)+"\n"), 0o444); err != nil {
			return err
		}
		binds = append(binds, [2]string{f, "/etc/machine-id"})
	}
	if _, err := makeCgroup(hs, cgroup); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	var dirs []string
	for _, h := range hs {
		dirs = append(dirs, filepath.Join(h.Own, cgroup))
	}
	n.holder, err = startHolder(holderSpec{Node: n.Name, Binds: binds, Cgroups: hs}, dirs, filepath.Join(n.c.Dir, "logs", n.Name+"_holder.log"))
	if err != nil {
		return err
	}
	pid := strconv.Itoa(n.holder.pid)
	// The hub's end is named after the node.
	for _, args := range [][]string{
		{"link", "add", n.Name, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{"link", "set", n.Name, "master", hubBridge, "up"},
	} {
		if out, err := runCmd(exec.Command("ip", args...)); err != nil {
			return fmt.Errorf("node %s: ip %s: %v: %s", n.Name, strings.Join(args, " "), err, out)
		}
	}
	in := [][]string{
		{"ip", "addr", "add", n.IP + "/24", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", n.c.NodeIP},
	}
	if n.IPv6 != "" {
		in = append(in,
			[]string{"ip", "-6", "addr", "add", n.IPv6 + "/64", "dev", "eth0", "nodad"},
			[]string{"ip", "-6", "route", "add", "default", "via", hubNetv6 + "1"},
			// A node routes its pods' IPv6 as it does their IPv4 (a new
			// network namespace forwards IPv4 only).
			[]string{"sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"})
	}
	for _, args := range in {
		if _, err := n.Run(context.Background(), args[0], args[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// start starts the node's containerd with the archives imported, its
// kubelet, waiting until the Node has its pod CIDRs, and (N nodes) its
// kube-proxy.
func (n *Node) start(ctx context.Context, archives []string) error {
	start := time.Now()
	if err := n.startContainerd(ctx, archives); err != nil {
		return err
	}
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	if n.holder != nil {
		if err := n.startKubeProxy(ctx); err != nil {
			return err
		}
	}
	n.c.opts.Logf("node %s up in %s", n.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// stop stops the node's daemons: what was run with RunDaemon, kube-proxy,
// the kubelet, containerd; then its holder.
func (n *Node) stop() {
	c := n.c
	c.mu.Lock()
	var extra []*daemon
	for i := len(c.order) - 1; i >= 0; i-- {
		name := c.order[i]
		if comp, ok := strings.CutPrefix(name, n.Name+"/"); ok && comp != "kube-proxy" && comp != "kubelet" && comp != "containerd" {
			extra = append(extra, c.daemons[name])
		}
	}
	c.mu.Unlock()
	for _, d := range extra {
		d.stop(15 * time.Second)
	}
	for _, comp := range []string{"kube-proxy", "kubelet", "containerd"} {
		if d := c.daemon(n.daemonName(comp)); d != nil {
			d.stop(15 * time.Second)
		}
	}
	if n.holder != nil {
		n.holder.stop()
	}
}

func (n *Node) startContainerd(ctx context.Context, archives []string) error {
	dir := filepath.Join(n.Dir, "containerd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	n.Containerd = filepath.Join(dir, "containerd.sock")
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), n.Containerd, filepath.Join(dir, "opt"), PauseImage)
	confPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	name := n.daemonName("containerd")
	if err := n.c.runDaemon(name, n.Command("containerd", "--config", confPath, "--log-level", "info")); err != nil {
		return err
	}
	if err := n.c.waitFor(ctx, time.Minute, n.Name+"'s containerd to serve", name, func() error {
		_, err := n.Ctr(ctx, "version")
		return err
	}); err != nil {
		return err
	}
	for _, a := range archives {
		start := time.Now()
		out, err := n.Ctr(ctx, "images", "import", a)
		if err != nil {
			return fmt.Errorf("node %s: importing %s: %v", n.Name, a, err)
		}
		n.c.opts.Logf("%s: imported %s in %s: %s", n.Name, filepath.Base(a), time.Since(start).Round(time.Millisecond), strings.Join(strings.Fields(out), " "))
	}
	return nil
}

// Ctr runs ctr on the node's containerd, in the CRI's namespace (from
// this program: the socket is a file of the cluster's directory).
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := runCmd(exec.CommandContext(ctx, "ctr", append([]string{"--address", n.Containerd, "-n", "k8s.io"}, args...)...))
	if err != nil {
		return string(out), fmt.Errorf("node %s: ctr %s: %v: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (n *Node) startKubelet(ctx context.Context) error {
	c, p := n.c, n.c.pki
	dir := filepath.Join(n.Dir, "kubelet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// A node of its own network namespace has the standard port.
	port := 10250
	if n.holder == nil {
		var err error
		if port, err = freePort(n.IP); err != nil {
			return err
		}
	}
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
oomScoreAdj: 0
makeIPTablesUtilChains: false
resolvConf: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
serializeImagePulls: false
maxPods: 110
`, n.IP, port, p.path("ca.crt"), n.Containerd, resolv)
	if c.opts.ClusterDNS {
		conf += fmt.Sprintf("clusterDNS: [%s]\nclusterDomain: %s\n", ClusterDNSIP, ClusterDomain)
	}
	confPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	kc := filepath.Join(dir, "kubelet.kubeconfig")
	if err := p.kubeconfig(kc, c.APIServer, n.identity()); err != nil {
		return err
	}
	name := n.daemonName("kubelet")
	if err := c.runDaemon(name, n.Command(c.opts.Kube, "kubelet", "--kubeconfig="+kc, "--config="+confPath, "--root-dir=/var/lib/kubelet",
		"--cert-dir="+filepath.Join(dir, "pki"), "--hostname-override="+n.Name, "--node-ip="+strings.Join(n.IPs(), ","), "--v=2")); err != nil {
		return err
	}
	want := 1
	if c.opts.DualStack {
		want = 2
	}
	return c.waitFor(ctx, 2*time.Minute, "node "+n.Name+" to be registered with its pod CIDRs", name, func() error {
		var node struct {
			Spec struct {
				PodCIDRs []string `json:"podCIDRs"`
			} `json:"spec"`
		}
		if err := c.KubectlJSON(ctx, &node, "get", "node", n.Name); err != nil {
			return err
		}
		if len(node.Spec.PodCIDRs) < want {
			return fmt.Errorf("spec.podCIDRs %v", node.Spec.PodCIDRs)
		}
		n.PodCIDRs = node.Spec.PodCIDRs
		return nil
	})
}

// startKubeProxy starts the node's kube-proxy, in nftables mode (this
// kernel has no IP_VS), leaving conntrack's limits alone
// (nf_conntrack_max is read-only in a network namespace), and waits until
// it has programmed the kubernetes Service.
func (n *Node) startKubeProxy(ctx context.Context) error {
	c, p := n.c, n.c.pki
	dir := filepath.Join(n.Dir, "kube-proxy")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kc := filepath.Join(dir, "kube-proxy.kubeconfig")
	if err := p.kubeconfig(kc, c.APIServer, "kube-proxy"); err != nil {
		return err
	}
	conf := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: nftables
hostnameOverride: %s
clusterCIDR: %s
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, kc, n.Name, c.ClusterCIDRs())
	confPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	name := n.daemonName("kube-proxy")
	if err := c.runDaemon(name, n.Command(c.opts.Kube, "kube-proxy", "--config="+confPath, "--v=2")); err != nil {
		return err
	}
	return c.waitFor(ctx, 2*time.Minute, "kube-proxy on "+n.Name+" to route the kubernetes Service", name, func() error {
		out, err := n.Run(ctx, "nft", "list", "table", "ip", "kube-proxy")
		if err != nil {
			return err
		}
		if !strings.Contains(out, ServiceIP) {
			return errors.New("no rule for " + ServiceIP + " yet")
		}
		return nil
	})
}

// ipFamily is "4" or "6", the family of an address or CIDR.
func ipFamily(s string) string {
	ip, _, _ := strings.Cut(s, "/")
	if p := net.ParseIP(ip); p != nil && p.To4() == nil {
		return "6"
	}
	return "4"
}

// cgroupDirs are the node's cgroup, one directory per hierarchy (N
// nodes; none for the single node).
func (n *Node) cgroupDirs() []string {
	if n.holder == nil {
		return nil
	}
	var out []string
	for _, p := range n.holder.procs {
		out = append(out, filepath.Dir(p))
	}
	return out
}
