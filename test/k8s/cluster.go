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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The cluster's addresses.
const (
	NodeName    = "kt-node"
	ServiceCIDR = "10.96.0.0/12"
	ServiceIP   = "10.96.0.1" // the kubernetes Service, which kube-proxy would route
	ClusterCIDR = "10.244.0.0/16"
	KernelLock  = "/tmp/kurma-kernel.lock"
	natTable    = "kurma_k8stest"
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
	// CNIPlugins are copied into the node's /opt/cni/bin, as its CNI
	// plugins package would have them: containerd's CRI runs the
	// loopback plugin for every pod.
	CNIPlugins []string
	// Archives are docker-archives imported into containerd's k8s.io
	// namespace beside the cluster's own images (kurma's image).
	Archives []string
	// Logf reports progress.
	Logf func(format string, args ...any)
	// Keep leaves the work directory (logs) in place after Close.
	Keep bool
}

// Cluster is a running single-node cluster.
type Cluster struct {
	opts       Options
	Dir        string
	NodeIP     string
	APIServer  string
	Kubeconfig string
	Containerd string // containerd's socket
	PodCIDR    string
	KubeletLog string

	daemons    map[string]*daemon
	order      []string
	kernel     *kernelState
	lock       *os.File
	mounts     []string
	madeDirs   []string
	stopReaper context.CancelFunc
	pki        *pki
	closeOnce  sync.Once
	closeErr   error
}

// Start brings the cluster up: it takes the kernel-test lock, snapshots
// the machine's kernel state, mounts the node's paths, and starts etcd,
// the API server, controller-manager, scheduler, containerd (with the
// images imported) and the kubelet; it returns once the Node is
// registered with its pod CIDR. On error everything started is torn
// down.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if os.Getenv(nsEnv) != "1" {
		return nil, errors.New("k8stest: call EnterNodeNamespace first")
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
	if c.kernel, err = snapshotKernel(); err != nil {
		return c, err
	}
	c.kernel.WorkDir, c.kernel.KeepWorkDir = c.Dir, opts.Keep
	if err := c.kernel.save(os.Getenv(stateEnv)); err != nil {
		return c, err
	}
	if c.NodeIP, err = nodeIP(); err != nil {
		return c, err
	}
	if err := c.mountNode(); err != nil {
		return c, err
	}
	if err := c.writePKI(); err != nil {
		return c, err
	}
	start := time.Now()
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	opts.Logf("control plane up in %s (API server %s)", time.Since(start).Round(time.Millisecond), c.APIServer)
	if err := c.startContainerd(ctx); err != nil {
		return c, err
	}
	if err := c.startKubelet(ctx); err != nil {
		return c, err
	}
	opts.Logf("node %s registered with pod CIDR %s (%s since the control plane started)", NodeName, c.PodCIDR, time.Since(start).Round(time.Millisecond))
	return c, nil
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

// mountNode mounts the node's private paths (see the package doc), and
// over /proc/sys files the kubelet would set, files holding the values it
// wants: kubelet sets vm.overcommit_memory, kernel.panic, ... for the
// whole machine otherwise.
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
	for _, p := range nodePaths {
		src := filepath.Join(c.Dir, "node", strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "_"))
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := c.mountpoint(p); err != nil {
			return err
		}
		if err := c.mount(src, p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for _, p := range c.opts.CNIPlugins {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("the node's CNI plugins: %w", err)
		}
		if err := os.WriteFile(filepath.Join("/opt/cni/bin", filepath.Base(p)), b, 0o755); err != nil {
			return err
		}
	}
	want := map[string]string{"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
		"kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000"}
	for k, v := range want {
		p := "/proc/sys/" + k
		cur, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(cur)) == v {
			continue
		}
		f := filepath.Join(c.Dir, "sysctl_"+strings.ReplaceAll(k, "/", "_"))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
		if err := c.mount(f, p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	return nil
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
	ip := net.ParseIP(c.NodeIP)
	if err := p.issue("apiserver", "kube-apiserver", nil,
		[]net.IP{ip, net.ParseIP(ServiceIP), net.ParseIP("127.0.0.1")},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}); err != nil {
		return err
	}
	if err := p.issue("admin", "kurma-k8s-test", []string{"system:masters"}, nil, nil); err != nil {
		return err
	}
	if err := p.issue("kubelet", "system:node:"+NodeName, []string{"system:nodes"}, nil, nil); err != nil {
		return err
	}
	return p.serviceAccountKey()
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
	d, err := startDaemon(name, filepath.Join(c.Dir, "logs", name+".log"), cmd)
	if err != nil {
		return err
	}
	c.daemons[name] = d
	c.order = append(c.order, name)
	return nil
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
		if d := c.daemons[name]; d != nil && !d.running() {
			return fmt.Errorf("%s exited (%v) while waiting for %s; its log:\n%s", name, d.err, what, d.tail(40))
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("%s: not after %s: %v", what, timeout, last)
			if d := c.daemons[name]; d != nil {
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

	apiPort, err := freePort(c.NodeIP)
	if err != nil {
		return err
	}
	c.APIServer = "https://" + net.JoinHostPort(c.NodeIP, strconv.Itoa(apiPort))
	if err := c.run("kube-apiserver", "--etcd-servers="+etcdURL,
		"--advertise-address="+c.NodeIP, "--bind-address="+c.NodeIP, "--secure-port="+strconv.Itoa(apiPort),
		"--service-cluster-ip-range="+ServiceCIDR,
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
	// What kube-proxy does for the kubernetes Service, for the host's own
	// connections: hostNetwork pods (kurma's) reach the API server at the
	// address Kubernetes gives them (KUBERNETES_SERVICE_HOST).
	rule := fmt.Sprintf("table ip %s {\n chain output {\n  type nat hook output priority -100;\n  ip daddr %s tcp dport 443 dnat to %s:%d\n }\n}\n",
		natTable, ServiceIP, c.NodeIP, apiPort)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rule)
	if out, err := runCmd(cmd); err != nil {
		return fmt.Errorf("nft (the kubernetes Service's address): %v: %s", err, out)
	}

	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := p.kubeconfig(c.Kubeconfig, c.APIServer, "admin"); err != nil {
		return err
	}
	if err := c.run("kube-controller-manager", "--kubeconfig="+c.Kubeconfig,
		"--allocate-node-cidrs=true", "--cluster-cidr="+ClusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--service-account-private-key-file="+p.path("sa.key"), "--root-ca-file="+p.path("ca.crt"),
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false"); err != nil {
		return err
	}
	return c.run("kube-scheduler", "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0")
}

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

func (c *Cluster) startContainerd(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "containerd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	c.Containerd = filepath.Join(dir, "containerd.sock")
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
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Containerd, filepath.Join(dir, "opt"), PauseImage)
	confPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	if err := c.runDaemon("containerd", exec.Command("containerd", "--config", confPath, "--log-level", "info")); err != nil {
		return err
	}
	if err := c.waitFor(ctx, time.Minute, "containerd to serve", "containerd", func() error {
		_, err := c.Ctr(ctx, "version")
		return err
	}); err != nil {
		return err
	}
	images := filepath.Join(c.Dir, "images.tar")
	if err := writeImages(ctx, c.opts.ModuleDir, images); err != nil {
		return err
	}
	for _, a := range append([]string{images}, c.opts.Archives...) {
		start := time.Now()
		if out, err := c.Ctr(ctx, "images", "import", a); err != nil {
			return fmt.Errorf("importing %s: %v", a, err)
		} else {
			c.opts.Logf("imported %s in %s: %s", filepath.Base(a), time.Since(start).Round(time.Millisecond), strings.Join(strings.Fields(out), " "))
		}
	}
	return nil
}

// Ctr runs ctr on the node's containerd, in the CRI's namespace.
func (c *Cluster) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := runCmd(exec.CommandContext(ctx, "ctr", append([]string{"--address", c.Containerd, "-n", "k8s.io"}, args...)...))
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	p := c.pki
	dir := filepath.Join(c.Dir, "kubelet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	port, err := freePort(c.NodeIP)
	if err != nil {
		return err
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
`, c.NodeIP, port, p.path("ca.crt"), c.Containerd, resolv)
	confPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	kc := filepath.Join(dir, "kubelet.kubeconfig")
	if err := p.kubeconfig(kc, c.APIServer, "kubelet"); err != nil {
		return err
	}
	if err := c.run("kubelet", "--kubeconfig="+kc, "--config="+confPath, "--root-dir=/var/lib/kubelet",
		"--cert-dir="+filepath.Join(dir, "pki"), "--hostname-override="+NodeName, "--node-ip="+c.NodeIP, "--v=2"); err != nil {
		return err
	}
	c.KubeletLog = c.daemons["kubelet"].log
	return c.waitFor(ctx, 2*time.Minute, "node "+NodeName+" to be registered with a pod CIDR", "kubelet", func() error {
		var node struct {
			Spec struct {
				PodCIDR string `json:"podCIDR"`
			} `json:"spec"`
		}
		if err := c.KubectlJSON(ctx, &node, "get", "node", NodeName); err != nil {
			return err
		}
		if node.Spec.PodCIDR == "" {
			return errors.New("no spec.podCIDR yet")
		}
		c.PodCIDR = node.Spec.PodCIDR
		return nil
	})
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

// Log is the tail of component name's log.
func (c *Cluster) Log(name string, lines int) string {
	if d := c.daemons[name]; d != nil {
		return d.tail(lines)
	}
	return ""
}

// LogPath is component name's log file.
func (c *Cluster) LogPath(name string) string {
	if d := c.daemons[name]; d != nil {
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
	for _, name := range []string{"kubelet", "containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		if d := c.daemons[name]; d != nil {
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
	if c.kernel != nil {
		found, kerrs := c.kernel.cleanNew()
		errs = append(errs, kerrs...)
		if len(found) > 0 {
			c.opts.Logf("teardown: removed what the cluster made in the kernel: %s", strings.Join(found, ", "))
		}
		for t, before := range c.kernel.Tables {
			if now, err := nftTable(t); err != nil || now != before {
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
	} else if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
