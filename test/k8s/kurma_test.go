package k8stest

// TestKurmaOnKubernetes is `make k8s-test`: kurma's image and its
// DaemonSet, exactly as shipped (deploy/kubernetes/kurma.yaml), on a real
// single-node cluster. It needs `make image` (images/out/kurma.tar and
// kurma-bin/kurmactl) and the kube binary (KURMA_K8S_KUBE, default
// out/kube); the Makefile builds both.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	EnterNodeNamespace()
	os.Exit(m.Run())
}

// Paths on the node (in its mount namespace) that the DaemonSet uses.
const (
	conflistPath = "/etc/cni/net.d/00-kurma.conflist"
	kurmaCNIPath = "/opt/cni/bin/kurma-cni"
	kurmadSocket = "/run/kurma/kurmad.sock"
	localSubnet  = "172.30.0.0/16" // the manifest's localnet
)

// repo is the kurma repository's root.
func repo(t testing.TB) string {
	t.Helper()
	abs, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func need(t testing.TB, p, hint string) string {
	t.Helper()
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (%s)", p, err, hint)
	}
	return p
}

// startCluster starts the single-node cluster with kurma's image
// imported, and tears it down when the test ends.
func startCluster(t *testing.T) *Cluster {
	return startNodes(t, Options{})
}

// startNodes starts a cluster of opts.Nodes nodes (with DualStack) with
// kurma's image (and opts.Archives) imported on each, and tears it down
// when the test ends.
func startNodes(t *testing.T, opts Options) *Cluster {
	t.Helper()
	root := repo(t)
	kube := os.Getenv("KURMA_K8S_KUBE")
	if kube == "" {
		kube = "out/kube"
	}
	kube, _ = filepath.Abs(kube)
	need(t, kube, "make k8s-test builds it")
	archive := need(t, filepath.Join(root, "images/out/kurma.tar"), "run make image first")
	moduleDir, _ := filepath.Abs(".")
	start := time.Now()
	loopback := need(t, filepath.Join(root, "images/out/bin/loopback"), "run make image first")
	opts.Kube, opts.ModuleDir, opts.Archives, opts.CNIPlugins = kube, moduleDir, append([]string{archive}, opts.Archives...), []string{loopback}
	opts.Logf = func(f string, a ...any) { t.Logf("[%5.1fs] "+f, append([]any{time.Since(start).Seconds()}, a...)...) }
	opts.Keep = os.Getenv("KURMA_K8S_KEEP") != ""
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				for _, comp := range []string{"kubelet", "containerd"} {
					t.Logf("%s's %s log (last 40 lines):\n%s", n.Name, comp, n.Log(comp, 40))
				}
				// The kubelet's pod logs, on the node: also those of pods
				// already gone.
				logs, _ := filepath.Glob(n.Path("/var/log/pods/kurma-system_*/*/*.log"))
				for _, l := range logs {
					t.Logf("%s (last 60 lines):\n%s", l, tailFile(l, 60))
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	return c
}

// step logs what the test does next, with the time since the test began.
type stepper struct {
	t     *testing.T
	start time.Time
}

func (s *stepper) step(format string, args ...any) {
	s.t.Logf("[%5.1fs] == "+format, append([]any{time.Since(s.start).Seconds()}, args...)...)
}

// TestKurmaOnKubernetes: the shipped manifest on a node without a network.
// kurma-cni's conflist appears only once kurmad's networks run, the
// DaemonSet becomes Ready and the node network-ready; a Deployment with a
// hostPort answers from the host, from an address of the node's pod
// CIDR; a pod annotated kurma.dev/networks: "podnet,localnet" gets both,
// an interface and an address in each subnet; one naming a network kurmad
// lacks fails its sandbox, naming it, with nothing attached; a rolling restart of the
// DaemonSet while they run keeps them answering throughout, with the same
// addresses, the conflist in place and kurmad holding the same pods, and
// the new kurmad attaches new pods; deleting the workloads leaves no pod
// in kurmad, no veth, lease, netns bind or port rule; deleting the
// DaemonSet removes kurma-cni and its conflist.
func TestKurmaOnKubernetes(t *testing.T) {
	if nodes, _ := NodesFromEnv(); nodes != 1 {
		t.Skipf("%s=%d: this is the single-node test (TestKurmaAcrossNodes is the N-node one)", NodesEnv, nodes)
	}
	s := &stepper{t: t, start: time.Now()}
	c := startCluster(t)
	ctx := context.Background()
	root := repo(t)
	kurmactl := need(t, filepath.Join(root, "images/out/kurma-bin/kurmactl"), "run make image first")

	s.step("without a network the node is not ready")
	if ready, msg := nodeReady(t, c); ready {
		t.Fatalf("node Ready before any network is installed (%s)", msg)
	}

	s.step("kubectl apply -f deploy/kubernetes/kurma.yaml")
	if out, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(root, "deploy/kubernetes/kurma.yaml")); err != nil {
		t.Fatal(err)
	} else {
		t.Log(strings.TrimSpace(out))
	}
	// The conflist must appear only once kurmad serves and podnet runs.
	waitFor(t, 5*time.Minute, "kurma-cni's conflist on the node", func() error {
		if _, err := os.Stat(conflistPath); err != nil {
			return err
		}
		return nil
	})
	nets := kurmadNetworks(t, kurmactl)
	if nets["podnet"] != "running" {
		t.Errorf("the conflist was installed while podnet is %q (networks: %v)", nets["podnet"], nets)
	}
	if _, err := os.Stat(kurmaCNIPath); err != nil {
		t.Errorf("the conflist is installed but kurma-cni is not: %v", err)
	}
	checkConflist(t)
	s.step("conflist installed: waiting for the DaemonSet and the node to be ready")
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the node to be Ready (network ready)", func() error {
		if ready, msg := nodeReady(t, c); !ready {
			return errors.New(msg)
		}
		return nil
	})
	firstKurmad := kurmadPod(t, c)

	s.step("workloads: a Deployment with a hostPort, a pod on podnet and localnet")
	hostPort, err := freePort(c.NodeIP)
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, c, workloads(hostPort))
	if _, err := c.Kubectl(ctx, "rollout", "status", "deploy/web", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "pod/multi", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	_, cidr, _ := net.ParseCIDR(c.PodCIDR)
	_, local, _ := net.ParseCIDR(localSubnet)
	web := podsByName(t, c, "app=web")
	if len(web) != 1 {
		t.Fatalf("web pods: %v", web)
	}
	var webName, webIP string
	for webName, webIP = range web {
	}
	if !cidr.Contains(net.ParseIP(webIP)) {
		t.Errorf("web's pod IP %s is not in the node's pod CIDR %s", webIP, c.PodCIDR)
	}
	hostURL := fmt.Sprintf("http://%s/", net.JoinHostPort(c.NodeIP, fmt.Sprint(hostPort)))
	if body := get(t, hostURL); body != webName {
		t.Errorf("%s (the hostPort) answered %q, want the pod's name %s", hostURL, body, webName)
	}
	multiIP := podsByName(t, c, "app=multi")["multi"]
	addrs := podAddrs(t, c, "multi")
	if !addrIn(addrs["eth0"], cidr) || addrs["eth0"] != multiIP {
		t.Errorf("multi's eth0 %q: want its pod IP %s, in %s (interfaces %v)", addrs["eth0"], multiIP, c.PodCIDR, addrs)
	}
	var second string
	for ifc, a := range addrs {
		if ifc != "eth0" && ifc != "lo" && addrIn(a, local) {
			second = ifc
		}
	}
	if second == "" {
		t.Errorf("multi has no interface in localnet's %s: %v", localSubnet, addrs)
	}
	pods := kurmadPods(t, kurmactl)
	if p, ok := pods["default/multi"]; !ok || !slices.Equal(p.networks(), []string{"podnet", "localnet"}) {
		t.Errorf("kurmad's pod default/multi: %+v, want networks podnet, localnet", p)
	}
	multiURL := "http://" + multiIP + "/"
	if body := get(t, multiURL); body != "multi" {
		t.Errorf("%s answered %q", multiURL, body)
	}

	s.step("a pod naming a network kurmad lacks: its sandbox fails, naming it, and nothing is attached")
	applyYAML(t, c, badPod)
	waitFor(t, 2*time.Minute, "the sandbox failure naming nosuchnet in bad's events", func() error {
		var events struct {
			Items []struct{ Reason, Message string } `json:"items"`
		}
		if err := c.KubectlJSON(ctx, &events, "get", "events", "--field-selector", "involvedObject.name=bad"); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, `unknown network "nosuchnet"`) {
				return nil
			}
		}
		return fmt.Errorf("events %+v", events.Items)
	})
	if p, ok := kurmadPods(t, kurmactl)["default/bad"]; ok {
		t.Errorf("kurmad holds the failed pod: %+v", p)
	}
	if _, err := c.Kubectl(ctx, "delete", "pod/bad", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}

	checkClusterNetwork(t, s, c)
	checkNetworkObjects(t, s, c)
	checkMultus(t, s, c)
	checkRegistryNetworks(t, s, c)

	s.step("kubectl rollout restart ds/kurmad while the pods serve")
	poll := startPolling(hostURL, multiURL)
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "restart", "ds/kurmad"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "a new kurmad pod to replace "+firstKurmad, func() error {
		if p := kurmadPod(t, c); p == firstKurmad || p == "" {
			return fmt.Errorf("kurmad pod %q", p)
		}
		return nil
	})
	// Some requests more once the new kurmad runs, then the verdict.
	seen := poll.requests()
	waitFor(t, 30*time.Second, "ten more requests after the rollout", func() error {
		if n := poll.requests(); n < seen+10 {
			return fmt.Errorf("%d requests", n-seen)
		}
		return nil
	})
	res := poll.stop()
	t.Logf("during the rollout: %d requests, %d failed; conflist missing in %d of %d looks", res.requests, len(res.failures), res.conflistMissing, res.looks)
	if res.requests < 10 || len(res.failures) > 0 {
		t.Errorf("the pods did not keep answering through the rollout: %d requests, failures: %v", res.requests, res.failures)
	}
	if res.conflistMissing > 0 {
		t.Errorf("kurma-cni's conflist was missing %d times during the rolling restart", res.conflistMissing)
	}
	if got := podsByName(t, c, "app=web"); got[webName] != webIP {
		t.Errorf("after the rollout web pods %v, want %s at %s", got, webName, webIP)
	}
	if got := podAddrs(t, c, "multi"); got["eth0"] != addrs["eth0"] || got[second] != addrs[second] {
		t.Errorf("after the rollout multi has %v, had %v", got, addrs)
	}
	after := kurmadPods(t, kurmactl)
	for name, p := range pods {
		if after[name].ID != p.ID {
			t.Errorf("after the rollout kurmad holds %s as %q, had %q: not re-adopted", name, after[name].ID, p.ID)
		}
	}
	applyYAML(t, c, afterPod)
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "pod/after", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if ip := podsByName(t, c, "app=after")["after"]; !cidr.Contains(net.ParseIP(ip)) {
		t.Errorf("a pod made after the rollout has IP %q, want one in %s", ip, c.PodCIDR)
	}

	measureRestartStorm(t, s, c)

	s.step("delete the workloads: nothing of them may stay")
	if _, err := c.Kubectl(ctx, "delete", "deploy/web", "pod/multi", "pod/after", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "kurmad to hold no pod", func() error {
		if p := kurmadPods(t, kurmactl); len(p) > 0 {
			return fmt.Errorf("kurmad holds %v", p)
		}
		return nil
	})
	for _, leak := range leftovers(hostPort) {
		t.Errorf("left behind after the workloads were deleted: %s", leak)
	}

	s.step("delete the DaemonSet: kurma-cni and its conflist go")
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "delete", "ds/kurmad", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "kurmad's pod to be gone", func() error {
		if p := kurmadPod(t, c); p != "" {
			return fmt.Errorf("pod %s", p)
		}
		return nil
	})
	for _, p := range []string{conflistPath, kurmaCNIPath} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the DaemonSet was deleted: %v, want it removed", p, err)
		}
	}
	if _, err := c.Kubectl(ctx, "delete", "-f", filepath.Join(root, "deploy/kubernetes/kurma.yaml"), "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
		t.Error(err)
	}
	s.step("done; tearing the cluster down")
}

// workloads: web, a Deployment with a hostPort; multi, a pod on podnet
// and localnet. Both serve their name over HTTP on port 80.
func workloads(hostPort int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: web
          image: %[1]s
          command: ["/bin/sh", "-c", "hostname > /www/index.html && exec httpd -f -p 80 -h /www"]
          ports: [{containerPort: 80, hostPort: %[2]d}]
          readinessProbe: {httpGet: {port: 80, path: /}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata:
  name: multi
  namespace: default
  labels: {app: multi}
  annotations: {kurma.dev/networks: "podnet,localnet"}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: multi
      image: %[1]s
      command: ["/bin/sh", "-c", "hostname > /www/index.html && exec httpd -f -p 80 -h /www"]
`, BusyboxImage, hostPort)
}

// badPod names podnet and a network kurmad does not have.
var badPod = fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: bad
  namespace: default
  annotations: {kurma.dev/networks: "podnet,nosuchnet"}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - {name: bad, image: %s, command: ["/bin/sleep", "3600"]}
`, BusyboxImage)

var afterPod = fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: after, namespace: default, labels: {app: after}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - {name: after, image: %s, command: ["/bin/sleep", "3600"]}
`, BusyboxImage)

func applyYAML(t *testing.T, c *Cluster, doc string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(context.Background(), "apply", "-f", f); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls check every 250 ms until it passes; the test fails after
// timeout with check's last error.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// nodeReady is the single node's Ready condition and its message.
func nodeReady(t *testing.T, c *Cluster) (bool, string) {
	t.Helper()
	return nodeReadyNamed(t, c, NodeName)
}

// nodeReadyNamed is node name's Ready condition and its message.
func nodeReadyNamed(t *testing.T, c *Cluster, name string) (bool, string) {
	t.Helper()
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
		} `json:"status"`
	}
	if err := c.KubectlJSON(context.Background(), &node, "get", "node", name); err != nil {
		t.Fatal(err)
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == "Ready" {
			return cond.Status == "True", cond.Reason + ": " + cond.Message
		}
	}
	return false, "no Ready condition"
}

// checkConflist checks the installed conflist offers CNI 1.0.0 and 1.1.0.
func checkConflist(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(conflistPath)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion  string   `json:"cniVersion"`
		CNIVersions []string `json:"cniVersions"`
	}
	if err := json.Unmarshal(b, &list); err != nil || list.CNIVersion != "1.0.0" || !slices.Equal(list.CNIVersions, []string{"1.0.0", "1.1.0"}) {
		t.Errorf("the installed conflist (%v):\n%s", err, b)
	}
}

// kurmadPod is the name of the DaemonSet's pod on the (first) node, ""
// when there is none.
func kurmadPod(t *testing.T, c *Cluster) string {
	t.Helper()
	var name string
	for _, p := range kurmadPodList(t, c) {
		if p.node != c.Nodes[0].Name {
			continue
		}
		if !p.deleting {
			return p.name
		}
		name = p.name
	}
	return name
}

// kurmadPodInfo is a pod of kurma's DaemonSet.
type kurmadPodInfo struct {
	name, node string
	deleting   bool
}

func kurmadPodList(t *testing.T, c *Cluster) []kurmadPodInfo {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Spec struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := c.KubectlJSON(context.Background(), &list, "-n", "kurma-system", "get", "pods", "-l", "app=kurmad"); err != nil {
		t.Fatal(err)
	}
	var out []kurmadPodInfo
	for _, p := range list.Items {
		out = append(out, kurmadPodInfo{name: p.Metadata.Name, node: p.Spec.NodeName, deleting: p.Metadata.DeletionTimestamp != nil})
	}
	return out
}

// podsByName maps the pods with label selector sel to their pod IPs.
func podsByName(t *testing.T, c *Cluster, sel string) map[string]string {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Status   struct {
				PodIP string `json:"podIP"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.KubectlJSON(context.Background(), &list, "get", "pods", "-l", sel); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		out[p.Metadata.Name] = p.Status.PodIP
	}
	return out
}

// podAddrs maps the interfaces of pod's network namespace to their IPv4
// address, as `ip -4 -o addr` shows them inside the pod.
func podAddrs(t *testing.T, c *Cluster, pod string) map[string]string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), "exec", pod, "--", "ip", "-4", "-o", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line) // 2: eth0    inet 10.244.0.5/24 brd ...
		if len(f) >= 4 && f[2] == "inet" {
			ip, _, _ := strings.Cut(f[3], "/")
			addrs[f[1]] = ip
		}
	}
	return addrs
}

func addrIn(ip string, n *net.IPNet) bool { return ip != "" && n.Contains(net.ParseIP(ip)) }

var httpClient = &http.Client{Timeout: 2 * time.Second}

// get fetches url (retrying for 30 s) and returns its body, trimmed.
func get(t *testing.T, url string) string {
	t.Helper()
	var body string
	waitFor(t, 30*time.Second, "GET "+url, func() error {
		b, err := fetch(url)
		body = b
		return err
	})
	return body
}

func fetch(url string) (string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

// kurmaPod is a pod as `kurmactl pod ls -o json` shows it.
type kurmaPod struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Attachments []struct {
		Network   string `json:"network"`
		Interface string `json:"interface"`
	} `json:"attachments"`
}

// networks are the networks the pod is attached to, in attach order.
func (p kurmaPod) networks() []string {
	var out []string
	for _, a := range p.Attachments {
		out = append(out, a.Network)
	}
	return out
}

// kurmadPods are kurmad's pods by name, asked on the node's socket.
func kurmadPods(t *testing.T, kurmactl string) map[string]kurmaPod {
	t.Helper()
	return kurmadPodsAt(t, kurmactl, kurmadSocket)
}

// kurmadPodsAt are the pods of the kurmad serving socket.
func kurmadPodsAt(t *testing.T, kurmactl, socket string) map[string]kurmaPod {
	t.Helper()
	out, err := exec.Command(kurmactl, "--socket", socket, "pod", "ls", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kurmactl pod ls: %v", err)
	}
	var pods []kurmaPod
	if err := json.Unmarshal(out, &pods); err != nil {
		t.Fatalf("kurmactl pod ls: %v: %s", err, out)
	}
	m := map[string]kurmaPod{}
	for _, p := range pods {
		m[p.Name] = p
	}
	return m
}

// kurmadNetworks maps kurmad's networks to their state (the last
// generation's listed).
func kurmadNetworks(t *testing.T, kurmactl string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, g := range kurmadGens(t, kurmactl) {
		m[g.Network] = g.State
	}
	return m
}

// leftovers lists what pods left on the node: veths on kurma's bridges,
// host-local leases in kurmad's state, kurmad's netns binds, portmap's
// rules for hostPort.
func leftovers(hostPort int) []string {
	var out []string
	for _, br := range []string{"kurma0", "kurma1"} {
		ports, _ := os.ReadDir("/sys/class/net/" + br + "/brif")
		for _, p := range ports {
			out = append(out, "veth "+p.Name()+" on "+br)
		}
	}
	for _, n := range []string{"podnet", "localnet"} {
		dir := filepath.Join("/var/lib/kurma/networks", n, "networks", n)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name() != "lock" && !strings.HasPrefix(e.Name(), "last_reserved_ip") {
				out = append(out, "lease "+filepath.Join(dir, e.Name()))
			}
		}
	}
	if entries, _ := os.ReadDir("/run/kurma/netns"); len(entries) > 0 {
		for _, e := range entries {
			out = append(out, "netns /run/kurma/netns/"+e.Name())
		}
	}
	if ruleset, err := exec.Command("nft", "list", "ruleset").Output(); err == nil && strings.Contains(string(ruleset), fmt.Sprintf("dport %d ", hostPort)) {
		out = append(out, fmt.Sprintf("an nftables rule for port %d", hostPort))
	}
	return out
}

// poller requests urls every 100 ms and looks at the conflist, until
// stopped.
type poller struct {
	stopCh chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    pollResult
}

type pollResult struct {
	requests, looks, conflistMissing int
	failures                         []string
}

func startPolling(urls ...string) *poller {
	p := &poller{stopCh: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.stopCh:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, u := range urls {
				_, err := fetch(u)
				p.mu.Lock()
				p.res.requests++
				if err != nil && len(p.res.failures) < 20 {
					p.res.failures = append(p.res.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
				}
				p.mu.Unlock()
			}
			_, err := os.Stat(conflistPath)
			p.mu.Lock()
			p.res.looks++
			if err != nil {
				p.res.conflistMissing++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *poller) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res.requests
}

func (p *poller) stop() pollResult {
	close(p.stopCh)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}
