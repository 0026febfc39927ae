package k8stest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The cluster's addresses.
const (
	NodeName    = "kt-node" // the single-node cluster's node
	ServiceCIDR = "10.96.0.0/12"
	ServiceIP   = "10.96.0.1" // the kubernetes Service, which kube-proxy routes
	// ClusterDNSIP and ClusterDomain are the cluster DNS's Service address
	// and domain (Options.ClusterDNS), as kubeadm's defaults.
	ClusterDNSIP  = "10.96.0.10"
	ClusterDomain = "cluster.local"
	ClusterCIDR   = "10.244.0.0/16"
	KernelLock    = "/tmp/kurma-kernel.lock"
	natTable      = "kurma_k8stest"

	// An N-node cluster's second family (Options.DualStack).
	ClusterCIDRv6 = "fd00:10:244::/56"
	ServiceCIDRv6 = "fd00:10:96::/112"
	// The hub's network: the bridge the nodes' eth0s hang on, the hub at
	// .1 (the API server's address), node i at .(i+1).
	hubBridge = "kt-hub0"
	hubNet    = "172.18.0."
	hubNetv6  = "fd00:18::"
	apiPort   = 6443
)

// nodePaths are the standard node paths the namespace gets private
// directories on (see the package doc).
var nodePaths = []string{"/etc/cni/net.d", "/opt/cni/bin", "/var/lib/cni", "/var/lib/kurma", "/var/lib/kubelet", "/var/log"}

// Options configure a cluster.
type Options struct {
	// Kube is the kube binary (cmd/kube).
	Kube string
	// ModuleDir is this module's directory (cmd/pause is built there).
	ModuleDir string
	// CNIPlugins are copied into each node's /opt/cni/bin, as its CNI
	// plugins package would have them: containerd's CRI runs the
	// loopback plugin for every pod.
	CNIPlugins []string
	// Archives are docker-archives imported into each node's containerd
	// (its k8s.io namespace) beside the cluster's own images (kurma's
	// image).
	Archives []string
	// Nodes is the number of nodes. 0 or 1: one node in this program's
	// network namespace (the machine's). 2 or more: each node in network,
	// mount and cgroup namespaces of its own, the control plane in a hub
	// namespace, which EnterNodeNamespace must have made (K8S_NODES).
	Nodes int
	// DualStack (2 or more nodes) gives the cluster an IPv6 family beside
	// IPv4: cluster and Service CIDRs, node addresses.
	DualStack bool
	// ClusterDNS gives the kubelets a cluster DNS (ClusterDNSIP,
	// ClusterDomain): what a cluster with CoreDNS has (DeployCoreDNS).
	ClusterDNS bool
	// Logf reports progress.
	Logf func(format string, args ...any)
	// Keep leaves the work directory (logs) in place after Close.
	Keep bool
}

// Cluster is a running cluster.
type Cluster struct {
	opts Options
	Dir  string
	// NodeIP is the API server's address: the single node's (the host's),
	// or the hub's.
	NodeIP     string
	APIServer  string
	Kubeconfig string
	// Nodes are the cluster's nodes, in order (kt-node, or kt-node-1 ...).
	Nodes []*Node
	// Of the single node (Nodes[0]), for its tests.
	Containerd string // containerd's socket
	PodCIDR    string
	KubeletLog string

	mu         sync.Mutex // daemons, order
	daemons    map[string]*daemon
	order      []string
	kernel     *kernelState
	lock       *os.File
	mounts     []string
	madeDirs   []string
	cgroupDirs []string // the cluster's cgroup in every hierarchy (N nodes)
	stopReaper context.CancelFunc
	pki        *pki
	closeOnce  sync.Once
	closeErr   error
}

// MultiNode is whether the cluster's nodes have namespaces of their own.
func (c *Cluster) MultiNode() bool { return c.opts.Nodes >= 2 }

// Start brings the cluster up: it takes the kernel-test lock, snapshots
// the machine's kernel state, makes the nodes (the single node's paths
// mounted in this namespace; or each node's namespaces, on the hub's
// bridge), and starts etcd, the API server, controller-manager,
// scheduler, and on each node containerd (with the images imported), the
// kubelet and (N nodes) kube-proxy; it returns once every Node is
// registered with its pod CIDR. On error everything started is torn down.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if os.Getenv(nsEnv) != "1" {
		return nil, errors.New("k8stest: call EnterNodeNamespace first")
	}
	if opts.Nodes >= 2 && os.Getenv(hubEnv) != "1" {
		return nil, fmt.Errorf("k8stest: %d nodes need the hub's network namespace: set K8S_NODES=%d before EnterNodeNamespace", opts.Nodes, opts.Nodes)
	}
	if opts.DualStack && opts.Nodes < 2 {
		return nil, errors.New("k8stest: dual-stack needs 2 or more nodes")
	}
	dir, err := os.MkdirTemp("", "kurma-k8s-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{opts: opts, Dir: dir, daemons: map[string]*daemon{}}
	active.Lock()
	active.clusters[c] = true
	active.Unlock()
	defer func() {
		if err != nil {
			if cerr := c.Close(); cerr != nil {
				opts.Logf("teardown after the failed start: %v", cerr)
			}
			c = nil
		}
	}()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return c, fmt.Errorf("becoming the subreaper: %w", err)
	}
	reapCtx, cancel := context.WithCancel(context.Background())
	c.stopReaper = cancel
	go reapLoop(reapCtx)

	if c.lock, err = os.OpenFile(KernelLock, os.O_CREATE|os.O_RDWR, 0o666); err != nil {
		return c, err
	}
	opts.Logf("waiting for %s (other kernel tests on this machine)", KernelLock)
	if err := unix.Flock(int(c.lock.Fd()), unix.LOCK_EX); err != nil {
		return c, fmt.Errorf("locking %s: %w", KernelLock, err)
	}
	if c.MultiNode() {
		// Nothing of the cluster is in the machine's network namespace:
		// what it leaves outside its namespaces is its cgroups and the
		// mount points it creates, both recorded as they are made.
		c.kernel = &kernelState{Hub: true}
	} else if c.kernel, err = snapshotKernel(); err != nil {
		return c, err
	}
	c.kernel.WorkDir, c.kernel.KeepWorkDir = c.Dir, opts.Keep
	if err := c.kernel.save(os.Getenv(stateEnv)); err != nil {
		return c, err
	}
	start := time.Now()
	if c.MultiNode() {
		if err := c.makeNodes(); err != nil {
			return c, err
		}
		opts.Logf("%d nodes made (namespaces, hub bridge %s) in %s", len(c.Nodes), hubBridge, time.Since(start).Round(time.Millisecond))
	} else {
		if c.NodeIP, err = nodeIP(); err != nil {
			return c, err
		}
		if err := c.mountNode(); err != nil {
			return c, err
		}
		c.Nodes = []*Node{{c: c, Name: NodeName, IP: c.NodeIP, Dir: c.Dir}}
	}
	if err := c.writePKI(); err != nil {
		return c, err
	}
	start = time.Now()
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	opts.Logf("control plane up in %s (API server %s)", time.Since(start).Round(time.Millisecond), c.APIServer)
	images := filepath.Join(c.Dir, "images.tar")
	if err := writeImages(ctx, c.opts.ModuleDir, images); err != nil {
		return c, err
	}
	archives := append([]string{images}, c.opts.Archives...)
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.start(ctx, archives)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if c.MultiNode() {
		if err := c.routePodCIDRs(); err != nil {
			return c, err
		}
	}
	n := c.Nodes[0]
	c.Containerd, c.PodCIDR, c.KubeletLog = n.Containerd, n.PodCIDRs[0], n.LogPath("kubelet")
	for _, n := range c.Nodes {
		opts.Logf("node %s (%s) registered with pod CIDRs %s (%s since the control plane started)", n.Name, strings.Join(n.IPs(), ","), strings.Join(n.PodCIDRs, ","), time.Since(start).Round(time.Millisecond))
	}
	return c, nil
}

// routePodCIDRs puts the hub, the control plane's host, on the pod
// network as a control-plane node is: a route to each node's pod CIDRs
// through that node. The API server reaches pods directly (pods/proxy,
// services/proxy, webhooks), whatever the network plugin; the routes go
// with the hub's namespace.
func (c *Cluster) routePodCIDRs() error {
	for _, n := range c.Nodes {
		for _, cidr := range n.PodCIDRs {
			via := n.IP
			if ipFamily(cidr) == "6" {
				via = n.IPv6
			}
			if via == "" {
				continue
			}
			args := []string{"route", "add", cidr, "via", via}
			if out, err := runCmd(exec.Command("ip", args...)); err != nil {
				return fmt.Errorf("the hub's route to %s's pods: ip %s: %v: %s", n.Name, strings.Join(args, " "), err, out)
			}
		}
	}
	return nil
}

// nodeIP is the address the host reaches other hosts from: the API
// server's advertise address and the kubelet's node IP. (A UDP "connect"
// only picks the route; nothing is sent.)
func nodeIP() (string, error) {
	conn, err := net.Dial("udp4", ServiceIP+":443")
	if err != nil {
		return "", fmt.Errorf("finding the node's address (a route to %s): %w", ServiceIP, err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// mountNode mounts the single node's private paths (see the package
// doc) in this namespace, and over /proc/sys files the kubelet would set,
// files holding the values it wants.
func (c *Cluster) mountNode() error {
	// The namespace starts with copies of the host's mounts: those under
	// the node's paths (the host's /run/netns and its netns files, say)
	// are the host's business, and would hide under the node's own.
	if err := unmountBelow(append([]string{"/run"}, nodePaths...)); err != nil {
		return err
	}
	if err := c.mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	binds, err := c.nodeFiles(c.Dir)
	if err != nil {
		return err
	}
	for _, b := range binds {
		if err := c.mount(b[0], b[1], "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	return nil
}

// kubeletSysctls are the machine-wide /proc/sys files the kubelet sets,
// and the values it wants: a node gets files holding them bound over,
// so the kubelet leaves the machine's alone.
var kubeletSysctls = map[string]string{"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
	"kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000"}

// nodeFiles makes a node's private directories for nodePaths under dir
// (the node's /opt/cni/bin with the CNI plugins), the mount points on the
// host, and the files of the kubelet's sysctls, and returns what to bind
// where.
func (c *Cluster) nodeFiles(dir string) (binds [][2]string, err error) {
	for _, p := range nodePaths {
		src := filepath.Join(dir, "node", strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "_"))
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, err
		}
		if err := c.mountpoint(p); err != nil {
			return nil, err
		}
		binds = append(binds, [2]string{src, p})
		if p != "/opt/cni/bin" {
			continue
		}
		for _, plugin := range c.opts.CNIPlugins {
			b, err := os.ReadFile(plugin)
			if err != nil {
				return nil, fmt.Errorf("the node's CNI plugins: %w", err)
			}
			if err := os.WriteFile(filepath.Join(src, filepath.Base(plugin)), b, 0o755); err != nil {
				return nil, err
			}
		}
	}
	for k, v := range kubeletSysctls {
		p := "/proc/sys/" + k
		cur, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(cur)) == v {
			continue
		}
		f := filepath.Join(dir, "sysctl_"+strings.ReplaceAll(k, "/", "_"))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return nil, err
		}
		binds = append(binds, [2]string{f, p})
	}
	return binds, nil
}

// unmountBelow detaches, in this namespace, every mount at or below the
// paths, deepest first.
func unmountBelow(paths []string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var below []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		for _, p := range paths {
			if f[4] == p || strings.HasPrefix(f[4], p+"/") {
				below = append(below, f[4])
			}
		}
	}
	sort.Slice(below, func(i, j int) bool { return len(below[i]) > len(below[j]) })
	for _, m := range below {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s (the host's, in the node's namespace): %w", m, err)
		}
	}
	return nil
}

// mountpoint makes p exist, remembering the directories it had to create
// on the host, to remove them at the end.
func (c *Cluster) mountpoint(p string) error {
	var missing []string
	for d := p; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil {
			return err
		}
		c.madeDirs = append(c.madeDirs, missing[i])
		c.kernel.MadeDirs = c.madeDirs
		if err := c.kernel.save(os.Getenv(stateEnv)); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", src, dst, err)
	}
	c.mounts = append(c.mounts, dst)
	return nil
}

func (c *Cluster) writePKI() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	ips := []net.IP{net.ParseIP(c.NodeIP), net.ParseIP(ServiceIP), net.ParseIP("127.0.0.1")}
	if c.opts.DualStack {
		ips = append(ips, net.ParseIP(hubNetv6+"1"), net.ParseIP(firstIP(ServiceCIDRv6)))
	}
	if err := p.issue("apiserver", "kube-apiserver", nil, ips,
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}); err != nil {
		return err
	}
	if err := p.issue("admin", "kurma-k8s-test", []string{"system:masters"}, nil, nil); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := p.issue(n.identity(), "system:node:"+n.Name, []string{"system:nodes"}, nil, nil); err != nil {
			return err
		}
	}
	// kube-proxy's, bound to system:node-proxier by the API server's
	// bootstrap RBAC.
	if err := p.issue("kube-proxy", "system:kube-proxy", nil, nil, nil); err != nil {
		return err
	}
	return p.serviceAccountKey()
}

// firstIP is the first address of cidr (a Service range's kubernetes
// Service).
func firstIP(cidr string) string {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return ""
	}
	ip := slices.Clone(n.IP)
	ip[len(ip)-1]++
	return ip.String()
}

func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run starts component name of the kube binary with args.
func (c *Cluster) run(name string, args ...string) error {
	cmd := exec.Command(c.opts.Kube, append([]string{name}, args...)...)
	cmd.Dir = c.Dir
	return c.runDaemon(name, cmd)
}

func (c *Cluster) runDaemon(name string, cmd *exec.Cmd) error {
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return err
	}
	d, err := startDaemon(name, filepath.Join(c.Dir, "logs", strings.ReplaceAll(name, "/", "_")+".log"), cmd)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.daemons[name] = d
	c.order = append(c.order, name)
	c.mu.Unlock()
	return nil
}

// daemon is the running component name ("kubelet", "kt-node-1/kubelet"),
// or nil.
func (c *Cluster) daemon(name string) *daemon {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.daemons[name]
}

// waitFor polls check until it passes, the timeout passes, ctx ends or
// daemon name exits.
func (c *Cluster) waitFor(ctx context.Context, timeout time.Duration, what, name string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if d := c.daemon(name); d != nil && !d.running() {
			return fmt.Errorf("%s exited (%v) while waiting for %s; its log:\n%s", name, d.err, what, d.tail(40))
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("%s: not after %s: %v", what, timeout, last)
			if d := c.daemon(name); d != nil {
				msg += fmt.Sprintf("\n%s's log:\n%s", name, d.tail(40))
			}
			return errors.New(msg)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	p := c.pki
	etcdPort, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	peerPort, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if err := c.run("etcd", "--name=k8stest", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL, "--initial-cluster=k8stest="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	if err := c.waitFor(ctx, time.Minute, "etcd to be healthy", "etcd", func() error {
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}

	// The hub's network is the cluster's own: the standard port.
	port := apiPort
	if !c.MultiNode() {
		if port, err = freePort(c.NodeIP); err != nil {
			return err
		}
	}
	c.APIServer = "https://" + net.JoinHostPort(c.NodeIP, strconv.Itoa(port))
	if err := c.run("kube-apiserver", "--etcd-servers="+etcdURL,
		"--advertise-address="+c.NodeIP, "--bind-address="+c.NodeIP, "--secure-port="+strconv.Itoa(port),
		"--service-cluster-ip-range="+c.serviceCIDRs(),
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.path("sa.pub"), "--service-account-signing-key-file="+p.path("sa.key"),
		"--authorization-mode=Node,RBAC",
		"--kubelet-client-certificate="+p.path("admin.crt"), "--kubelet-client-key="+p.path("admin.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=true", "--enable-priority-and-fairness=false", "--profiling=false",
		"--cert-dir="+filepath.Join(c.Dir, "apiserver")); err != nil {
		return err
	}
	hc, err := c.adminHTTP()
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, 2*time.Minute, "the API server to be ready", "kube-apiserver", func() error {
		resp, err := hc.Get(c.APIServer + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}
	if !c.MultiNode() {
		// What kube-proxy does for the kubernetes Service, for the host's
		// own connections: hostNetwork pods (kurma's) reach the API server
		// at the address Kubernetes gives them (KUBERNETES_SERVICE_HOST).
		// N nodes run kube-proxy itself.
		rule := fmt.Sprintf("table ip %s {\n chain output {\n  type nat hook output priority -100;\n  ip daddr %s tcp dport 443 dnat to %s:%d\n }\n}\n",
			natTable, ServiceIP, c.NodeIP, port)
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rule)
		if out, err := runCmd(cmd); err != nil {
			return fmt.Errorf("nft (the kubernetes Service's address): %v: %s", err, out)
		}
	}

	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := p.kubeconfig(c.Kubeconfig, c.APIServer, "admin"); err != nil {
		return err
	}
	masks := []string{"--node-cidr-mask-size=24"}
	if c.opts.DualStack {
		masks = []string{"--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64"}
	}
	if err := c.run("kube-controller-manager", append(masks, "--kubeconfig="+c.Kubeconfig,
		"--allocate-node-cidrs=true", "--cluster-cidr="+c.ClusterCIDRs(),
		"--service-cluster-ip-range="+c.serviceCIDRs(),
		"--service-account-private-key-file="+p.path("sa.key"), "--root-ca-file="+p.path("ca.crt"),
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false")...); err != nil {
		return err
	}
	return c.run("kube-scheduler", "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0")
}

// ClusterCIDRs are the cluster's pod CIDRs, comma-separated (IPv4 first).
func (c *Cluster) ClusterCIDRs() string {
	if c.opts.DualStack {
		return ClusterCIDR + "," + ClusterCIDRv6
	}
	return ClusterCIDR
}

func (c *Cluster) serviceCIDRs() string {
	if c.opts.DualStack {
		return ServiceCIDR + "," + ServiceCIDRv6
	}
	return ServiceCIDR
}

// AdminHTTP is an HTTP client with the admin identity, for requests to
// APIServer that must be timed without a kubectl process's start.
func (c *Cluster) AdminHTTP() (*http.Client, error) { return c.adminHTTP() }

// adminHTTP is an HTTP client with the admin identity.
func (c *Cluster) adminHTTP() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.pki.path("admin.crt"), c.pki.path("admin.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.pki.caCert)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}, nil
}

// Ctr runs ctr on the single node's containerd (see Node.Ctr).
func (c *Cluster) Ctr(ctx context.Context, args ...string) (string, error) {
	return c.Nodes[0].Ctr(ctx, args...)
}

// Kubectl runs kubectl as the cluster's admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.opts.Kube, append([]string{"kubectl", "--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := runCmd(cmd)
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// KubectlJSON runs kubectl ... -o json and decodes its output into out.
func (c *Cluster) KubectlJSON(ctx context.Context, out any, args ...string) error {
	s, err := c.Kubectl(ctx, append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), out)
}

// Log is the tail of component name's log ("kubelet" on the single node,
// "kt-node-1/kubelet" on N nodes; see Node.Log).
func (c *Cluster) Log(name string, lines int) string {
	if d := c.daemon(name); d != nil {
		return d.tail(lines)
	}
	return ""
}

// LogPath is component name's log file.
func (c *Cluster) LogPath(name string) string {
	if d := c.daemon(name); d != nil {
		return d.log
	}
	return ""
}

// Close tears the cluster down, whatever state it is in: the kubelet,
// then containerd, then the control plane are stopped; every process
// left below this one is killed; the node's mounts are unmounted and the
// mount points it created removed; the links, nftables tables and
// cgroups made since Start are removed; the kernel-test lock is
// released. It reports what it had to kill or remove, and what it could
// not.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.close()
		active.Lock()
		delete(active.clusters, c)
		active.Unlock()
	})
	return c.closeErr
}

func (c *Cluster) close() error {
	var errs []error
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.stop()
		}()
	}
	wg.Wait()
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		if d := c.daemon(name); d != nil {
			d.stop(15 * time.Second)
		}
	}
	killed, err := killDescendants(20 * time.Second)
	if err != nil {
		errs = append(errs, err)
	}
	if len(killed) > 0 {
		c.opts.Logf("teardown: killed %d processes left (containers, shims): %s", len(killed), strings.Join(killed, "; "))
	}
	if c.stopReaper != nil {
		c.stopReaper()
	}
	// Ours, and what the kubelet, containerd and kurmad mounted below
	// them (the kubelet binds its root dir on itself, volumes, netns).
	if len(c.mounts) > 0 {
		if err := unmountBelow(c.mounts); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(c.madeDirs) - 1; i >= 0; i-- {
		if err := os.Remove(c.madeDirs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.cgroupDirs) > 0 {
		// The nodes' cgroups, and what their kubelets, containerds and
		// kurmads made below them: empty now that every process is gone
		// (the kernel may take a moment to let go of the last ones).
		var kerrs []error
		_ = retryFor(10*time.Second, func() error {
			_, kerrs = removeCgroups(c.cgroupDirs)
			return errors.Join(kerrs...)
		})
		errs = append(errs, kerrs...)
	}
	if c.kernel != nil && !c.kernel.Hub {
		found, kerrs := c.kernel.cleanNew()
		errs = append(errs, kerrs...)
		if len(found) > 0 {
			c.opts.Logf("teardown: removed what the cluster made in the kernel: %s", strings.Join(found, ", "))
		}
		for t, before := range c.kernel.Tables {
			if now, err := nftTable(t); err != nil || !sameRules(now, before) {
				errs = append(errs, fmt.Errorf("nftables table %s, there before the cluster, is not as it was (%v):\nbefore:\n%s\nafter:\n%s", t, err, before, now))
			}
		}
	}
	if len(errs) == 0 && os.Getenv(stateEnv) != "" {
		os.Remove(os.Getenv(stateEnv)) // torn down: nothing for the parent to do
	}
	if c.lock != nil {
		c.lock.Close()
	}
	if c.opts.Keep || len(errs) > 0 {
		c.opts.Logf("the cluster's files and logs: %s", c.Dir)
	} else if err := removeAllSettled(c.Dir, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeAllSettled removes dir and what it holds, trying again until
// timeout: a container's rootfs mount point in it goes away with its node's
// mount namespace, after the namespace's last process, a moment after the
// kill (k8s-bench saw "directory not empty" on a task's rootfs once).
func removeAllSettled(dir string, timeout time.Duration) error {
	return retryFor(timeout, func() error { return os.RemoveAll(dir) })
}

// retryFor calls f every 100 ms until it succeeds or timeout has passed,
// and returns its last error: for what the kernel lets go of a moment
// after the processes holding it are gone.
func retryFor(timeout time.Duration, f func() error) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
