package k8stest

// TestKurmaAcrossNodes is `K8S_NODES=2 make k8s-test`: an N-node,
// dual-stack cluster on this machine, each node in namespaces of its own,
// first with flannel run on the nodes directly (the cluster routes), then
// with kurma's flannel manifest as shipped.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// directFlannel is the direct side on this cluster.
func directFlannel(t *testing.T, c *Cluster) DirectFlannel {
	root := repo(t)
	need(t, filepath.Join(root, "plugins/flannel/out/flanneld"), "make flanneld")
	return NewDirectFlannel(c, root)
}

func TestKurmaAcrossNodes(t *testing.T) {
	nodes, err := NodesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if nodes < 2 {
		t.Skipf("%s=%d: the N-node test needs %s=2 or more", NodesEnv, nodes, NodesEnv)
	}
	s := &stepper{t: t, start: time.Now()}
	c := startNodes(t, Options{Nodes: nodes, DualStack: true})
	ctx := context.Background()
	for i, n := range c.Nodes {
		for _, o := range c.Nodes[:i] {
			if strings.Join(o.PodCIDRs, ",") == strings.Join(n.PodCIDRs, ",") {
				t.Fatalf("nodes %s and %s have the same pod CIDRs %v", o.Name, n.Name, n.PodCIDRs)
			}
		}
		if len(n.PodCIDRs) != 2 || ipFamily(n.PodCIDRs[0]) != "4" || ipFamily(n.PodCIDRs[1]) != "6" {
			t.Errorf("node %s: pod CIDRs %v, want an IPv4 and an IPv6 one", n.Name, n.PodCIDRs)
		}
	}

	s.step("the cluster routes: flanneld and the CNI plugins run on the nodes directly")
	direct := directFlannel(t, c)
	if err := direct.Start(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitNodesReady(t, c)
	w := startWorkloads(t, c)
	w.checkAcrossNodes(t, "direct flannel")
	w.delete(t)
	if err := direct.Stop(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the nodes to be not ready (no network) once the direct side is gone", func() error {
		for _, n := range c.Nodes {
			if ready, _ := nodeReadyNamed(t, c, n.Name); ready {
				return fmt.Errorf("%s is Ready", n.Name)
			}
		}
		return nil
	})
	before := map[string]nodeState{}
	for _, n := range c.Nodes {
		before[n.Name] = snapshotNode(t, c, n)
	}

	root := repo(t)
	manifest := filepath.Join(root, "deploy/kubernetes/flannel/kurma-flannel.yaml")
	s.step("kubectl apply -f deploy/kubernetes/flannel/kurma-flannel.yaml (as shipped)")
	if out, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	} else {
		t.Log(strings.TrimSpace(out))
	}
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=5m"); err != nil {
		t.Fatal(err)
	}
	checkDaemonSetReady(t, c)
	waitNodesReady(t, c)
	leases := flannelLeases(t, c)
	w = startWorkloads(t, c)
	w.checkAcrossNodes(t, "kurma")

	checkClusterNetwork(t, s, c)
	checkNetworkObjects(t, s, c)
	checkSpreadNetworks(t, s, c)
	checkMultus(t, s, c)
	// polnet and opennet reuse spread's and apart's bridges, gone by now.
	checkPolicyPerNetwork(t, s, c)
	checkRegistryNetworks(t, s, c)
	checkOwnCredentials(t, s, c)

	s.step("kubectl rollout restart ds/kurmad while traffic flows between the nodes")
	watch := w.startWatchers(t)
	firstKurmad := kurmadPodsByNode(t, c)
	kurmactl := need(t, filepath.Join(root, "images/out/kurma-bin/kurmactl"), "run make image first")
	flannelBefore := flannelOnNodes(t, c, kurmactl)
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "restart", "ds/kurmad"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=5m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "a new kurmad pod on every node", func() error {
		now := kurmadPodsByNode(t, c)
		for node, p := range firstKurmad {
			if now[node] == p || now[node] == "" {
				return fmt.Errorf("%s: kurmad pod %q", node, now[node])
			}
		}
		return nil
	})
	watch.check(t, "the rollout restart", c.Nodes)
	// The new kurmads adopted the plugin containers: flanneld was never
	// restarted, its vxlan devices never made again.
	waitFor(t, time.Minute, "podnet running under the new kurma pods", func() error {
		for _, n := range c.Nodes {
			if g := netGens(t, kurmactl, n)["podnet"]; g.State != "running" {
				return fmt.Errorf("%s: podnet %+v", n.Name, g)
			}
		}
		return nil
	})
	if got := flannelOnNodes(t, c, kurmactl); !equalMaps(got, flannelBefore) {
		t.Errorf("across the rollout restart flanneld and its vxlan devices went from %v to %v: the rollout restarted flanneld", flannelBefore, got)
	}
	if got := podsByNode(t, c, "app=echo"); !samePods(got, w.echo) {
		t.Errorf("after the rollout restart echo's pods are %v, were %v", got, w.echo)
	}
	if got := flannelLeases(t, c); !equalMaps(got, leases) {
		t.Errorf("after the rollout restart flannel's leases are %v, were %v", got, leases)
	}
	w.checkTCP(t, "after the rollout restart")

	victim := c.Nodes[0]
	others := c.Nodes[1:]
	s.step("delete %s's kurma pod: the other nodes' pods unaffected", victim.Name)
	old := kurmadPodsByNode(t, c)[victim.Name]
	watch.mark(t)
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "delete", "pod", old, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "a new kurmad pod on "+victim.Name+", Ready", func() error {
		p := kurmadPodsByNode(t, c)[victim.Name]
		if p == "" || p == old {
			return fmt.Errorf("kurmad pod %q", p)
		}
		_, err := c.Kubectl(ctx, "-n", "kurma-system", "wait", "--for=condition=Ready", "pod/"+p, "--timeout=2s")
		return err
	})
	watch.check(t, "the deletion of "+victim.Name+"'s kurma pod", others)
	w.checkTCP(t, "after "+victim.Name+"'s kurma pod was recreated")
	if got := flannelLeases(t, c); !equalMaps(got, leases) {
		t.Errorf("after %s's kurma pod was recreated flannel's leases are %v, were %v", victim.Name, got, leases)
	}

	s.step("delete the workloads, then kurma: nothing may stay on any node")
	watch.delete(t)
	w.delete(t)
	for _, n := range c.Nodes {
		waitFor(t, 2*time.Minute, "kurmad on "+n.Name+" to hold no pod", func() error {
			if p := kurmadPodsAt(t, kurmactl, n.Path(kurmadSocket)); len(p) > 0 {
				return fmt.Errorf("kurmad holds %v", p)
			}
			return nil
		})
	}
	// No node's pods hold a Network any more: their finalizers are off,
	// and the CRD's deletion does not wait for them.
	waitNoFinalizers(t, c)
	if _, err := c.Kubectl(ctx, "delete", "-f", manifest, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "kurma's pods to be gone", func() error {
		if p := kurmadPodsByNode(t, c); len(p) > 0 {
			return fmt.Errorf("kurmad pods %v", p)
		}
		return nil
	})
	for _, n := range c.Nodes {
		for _, leak := range snapshotNode(t, c, n).since(before[n.Name]) {
			t.Errorf("%s: left behind after everything was deleted: %s", n.Name, leak)
		}
	}
	checkCleanupNode(t, s, c, before)
	s.step("done; tearing the cluster down")
}

// checkDaemonSetReady: kurma's DaemonSet has a Ready pod on every node.
func checkDaemonSetReady(t *testing.T, c *Cluster) {
	t.Helper()
	var ds struct {
		Status struct {
			Desired int `json:"desiredNumberScheduled"`
			Ready   int `json:"numberReady"`
		} `json:"status"`
	}
	if err := c.KubectlJSON(context.Background(), &ds, "-n", "kurma-system", "get", "ds/kurmad"); err != nil {
		t.Fatal(err)
	}
	if ds.Status.Desired != len(c.Nodes) || ds.Status.Ready != len(c.Nodes) {
		t.Errorf("DaemonSet kurmad: %d desired, %d ready; want %d of each", ds.Status.Desired, ds.Status.Ready, len(c.Nodes))
	}
	if got := kurmadPodsByNode(t, c); len(got) != len(c.Nodes) {
		t.Errorf("kurmad pods by node: %v, want one on each of %d nodes", got, len(c.Nodes))
	}
}

// kurmadPodsByNode maps the cluster's nodes to the DaemonSet's pod on
// them (not being deleted); a Node object the test makes without a
// kubelet (checkDeletedNodePruned's) does not count.
func kurmadPodsByNode(t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range kurmadPodList(t, c) {
		if !p.deleting && slices.ContainsFunc(c.Nodes, func(n *Node) bool { return n.Name == p.node }) {
			out[p.node] = p.name
		}
	}
	return out
}

// flannelAnnotations are the Node annotations flanneld's kube subnet
// manager writes: its lease, with the node's vxlan endpoint.
var flannelAnnotations = []string{"backend-type", "backend-data", "public-ip", "kube-subnet-manager"}

// flannelLeases checks every node carries flannel's annotations (for each
// family of the cluster) and returns them with the node's pod CIDRs: its
// lease, by node and key.
func flannelLeases(t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range c.Nodes {
		var node struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				PodCIDRs []string `json:"podCIDRs"`
			} `json:"spec"`
		}
		if err := c.KubectlJSON(context.Background(), &node, "get", "node", n.Name); err != nil {
			t.Fatal(err)
		}
		keys := flannelAnnotations
		if n.IPv6 != "" {
			keys = append(slicesClone(keys), "backend-v6-data", "public-ipv6")
		}
		for _, k := range keys {
			v, ok := node.Metadata.Annotations["flannel.alpha.coreos.com/"+k]
			if !ok {
				t.Errorf("node %s has no annotation flannel.alpha.coreos.com/%s (annotations: %v)", n.Name, k, node.Metadata.Annotations)
			}
			out[n.Name+" "+k] = v
		}
		if got := out[n.Name+" public-ip"]; got != n.IP {
			t.Errorf("node %s: flannel's public-ip %q, want the node's %s", n.Name, got, n.IP)
		}
		if got := out[n.Name+" backend-type"]; got != "vxlan" {
			t.Errorf("node %s: flannel's backend-type %q, want vxlan", n.Name, got)
		}
		out[n.Name+" podCIDRs"] = strings.Join(node.Spec.PodCIDRs, ",")
	}
	return out
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func samePods(a, b map[string]podInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for k, p := range a {
		q, ok := b[k]
		if !ok || p.Name != q.Name || strings.Join(p.IPs, ",") != strings.Join(q.IPs, ",") {
			return false
		}
	}
	return true
}

// waitNodesReady waits until every node is Ready.
func waitNodesReady(t *testing.T, c *Cluster) {
	t.Helper()
	waitFor(t, 3*time.Minute, "every node to be Ready", func() error {
		for _, n := range c.Nodes {
			if ready, msg := nodeReadyNamed(t, c, n.Name); !ready {
				return fmt.Errorf("%s: %s", n.Name, msg)
			}
		}
		return nil
	})
}

// nodeWorkloads are an N-node test's pods: echo, a Deployment with one pod
// per node behind a ClusterIP and a NodePort Service, and a client pod on
// each node.
type nodeWorkloads struct {
	c        *Cluster
	echo     map[string]podInfo // by node
	clients  map[string]podInfo // by node
	nodePort int
}

type podInfo struct {
	Name, Node string
	IPs        []string // IPv4 first
}

func workloadsYAML(c *Cluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: default}
spec:
  replicas: %[1]d
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      terminationGracePeriodSeconds: 1
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: echo}}}
      containers:
        - name: echo
          image: %[2]s
          command: ["/bin/sh", "-c", "%[3]s"]
          readinessProbe: {httpGet: {port: 80, path: /}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  ipFamilyPolicy: PreferDualStack
  selector: {app: echo}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: echo-np, namespace: default}
spec:
  type: NodePort
  selector: {app: echo}
  ports: [{port: 80}]
`, len(c.Nodes), BusyboxImage, echoScript)
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata: {name: client-%[1]s, namespace: default, labels: {app: client}}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
    - {name: client, image: %[2]s, command: ["/bin/sleep", "3600"]}
`, n.Name, BusyboxImage)
	}
	return b.String()
}

// echoScript serves, on port 80: / the pod's name; /cgi-bin/ip the
// address the request came from; /big 4 MiB.
const echoScript = `mkdir -p /www/cgi-bin && hostname > /www/index.html && ` +
	`printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR\\n' > /www/cgi-bin/ip && chmod +x /www/cgi-bin/ip && ` +
	`dd if=/dev/zero of=/www/big bs=1024 count=4096 2>/dev/null && exec httpd -f -p 80 -h /www`

// startWorkloads applies the workloads and waits until they run, echo's
// pods one per node.
func startWorkloads(t *testing.T, c *Cluster) *nodeWorkloads {
	t.Helper()
	ctx := context.Background()
	applyYAML(t, c, workloadsYAML(c))
	if _, err := c.Kubectl(ctx, "rollout", "status", "deploy/echo", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "pod", "-l", "app=client", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	w := &nodeWorkloads{c: c, echo: podsByNode(t, c, "app=echo"), clients: podsByNode(t, c, "app=client")}
	for _, n := range c.Nodes {
		if _, ok := w.echo[n.Name]; !ok {
			t.Fatalf("no echo pod on %s: %v", n.Name, w.echo)
		}
	}
	var svc struct {
		Spec struct {
			Ports []struct {
				NodePort int `json:"nodePort"`
			} `json:"ports"`
		} `json:"spec"`
	}
	if err := c.KubectlJSON(ctx, &svc, "get", "svc", "echo-np"); err != nil {
		t.Fatal(err)
	}
	w.nodePort = svc.Spec.Ports[0].NodePort
	return w
}

// podsByNode maps node names to the pods (label selector sel) on them.
func podsByNode(t *testing.T, c *Cluster, sel string) map[string]podInfo {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Spec     struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
			Status struct {
				PodIPs []struct{ IP string } `json:"podIPs"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.KubectlJSON(context.Background(), &list, "get", "pods", "-l", sel); err != nil {
		t.Fatal(err)
	}
	out := map[string]podInfo{}
	for _, p := range list.Items {
		pi := podInfo{Name: p.Metadata.Name, Node: p.Spec.NodeName}
		for _, ip := range p.Status.PodIPs {
			pi.IPs = append(pi.IPs, ip.IP)
		}
		if prev, ok := out[pi.Node]; ok {
			t.Fatalf("pods %s and %s (%s) are both on %s", prev.Name, pi.Name, sel, pi.Node)
		}
		out[pi.Node] = pi
	}
	return out
}

// exec runs the command in pod and returns its output, trimmed.
func (w *nodeWorkloads) exec(t *testing.T, pod string, cmd ...string) string {
	t.Helper()
	out, err := w.c.Kubectl(context.Background(), append([]string{"exec", pod, "--"}, cmd...)...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func urlFor(ip, path string) string {
	return "http://" + net.JoinHostPort(ip, "80") + path
}

// checkAcrossNodes: each node's client reaches every other node's echo
// pod at each of its addresses over TCP, and echo sees the client's pod
// address (no NAT); 4 MiB cross; the pods' MTU is flannel's, and a
// packet of that size crosses with DF set; the ClusterIP Service is
// answered by the echo pods of every node, from a client on each node; the
// NodePort answers from the hub on every node's address.
func (w *nodeWorkloads) checkAcrossNodes(t *testing.T, side string) {
	t.Helper()
	c := w.c
	for _, from := range c.Nodes {
		client := w.clients[from.Name]
		if len(client.IPs) != len(from.PodCIDRs) {
			t.Errorf("%s: client %s has addresses %v, want one in each of %v", side, client.Name, client.IPs, from.PodCIDRs)
		}
		for i, ip := range client.IPs {
			if i < len(from.PodCIDRs) && !cidrContains(from.PodCIDRs[i], ip) {
				t.Errorf("%s: client %s's address %s is not in its node's pod CIDR %s", side, client.Name, ip, from.PodCIDRs[i])
			}
		}
		mtu := w.exec(t, client.Name, "cat", "/sys/class/net/eth0/mtu")
		for _, to := range c.Nodes {
			if to == from {
				continue
			}
			echo := w.echo[to.Name]
			for i, ip := range echo.IPs {
				seen := remoteAddr(w.exec(t, client.Name, "timeout", "10", "wget", "-q", "-O", "-", urlFor(ip, "/cgi-bin/ip")))
				if i < len(client.IPs) && seen != client.IPs[i] {
					t.Errorf("%s: %s (%s) → %s (%s) at %s: the server saw %q, want the client's pod address %s (no NAT)",
						side, client.Name, from.Name, echo.Name, to.Name, ip, seen, client.IPs[i])
				}
				n := w.exec(t, client.Name, "sh", "-c", "timeout 20 wget -q -O - "+urlFor(ip, "/big")+" | wc -c")
				if n != strconv.Itoa(4<<20) {
					t.Errorf("%s: %s → %s at %s: 4 MiB transfer gave %s bytes", side, client.Name, echo.Name, ip, n)
				}
				checkPathMTU(t, w, side, from, client, ip, mtu)
			}
		}
		// The Service, at each of its addresses, answered by every node's pod.
		var svc struct {
			Spec struct {
				ClusterIPs []string `json:"clusterIPs"`
			} `json:"spec"`
		}
		if err := c.KubectlJSON(context.Background(), &svc, "get", "svc", "echo"); err != nil {
			t.Fatal(err)
		}
		for _, vip := range svc.Spec.ClusterIPs {
			// 20 requests, each to a backend chosen at random: every one
			// answers.
			answered := map[string]bool{}
			out := w.exec(t, client.Name, "sh", "-c", "for i in $(seq 20); do timeout 10 wget -q -O - "+urlFor(vip, "/")+"; done")
			for _, l := range strings.Split(out, "\n") {
				answered[strings.TrimSpace(l)] = true
			}
			for _, e := range w.echo {
				if !answered[e.Name] {
					t.Errorf("%s: the Service at %s from %s: answered by %v, never by %s (on %s)", side, vip, client.Name, keys(answered), e.Name, e.Node)
				}
			}
		}
	}
	for _, n := range c.Nodes {
		url := fmt.Sprintf("http://%s/", net.JoinHostPort(n.IP, strconv.Itoa(w.nodePort)))
		if body := get(t, url); !strings.HasPrefix(body, "echo-") {
			t.Errorf("%s: the NodePort %s from the hub answered %q", side, url, body)
		}
	}
}

// checkTCP: each node's client reaches every other node's echo pod at
// each of its addresses over a new TCP connection, and echo sees the
// client's pod address.
func (w *nodeWorkloads) checkTCP(t *testing.T, when string) {
	t.Helper()
	for _, from := range w.c.Nodes {
		client := w.clients[from.Name]
		for _, to := range w.c.Nodes {
			if to == from {
				continue
			}
			for i, ip := range w.echo[to.Name].IPs {
				seen := remoteAddr(w.exec(t, client.Name, "timeout", "10", "wget", "-q", "-O", "-", urlFor(ip, "/cgi-bin/ip")))
				if i < len(client.IPs) && seen != client.IPs[i] {
					t.Errorf("%s: %s → %s at %s: the server saw %q, want %s", when, client.Name, w.echo[to.Name].Name, ip, seen, client.IPs[i])
				}
			}
		}
	}
}

// watchers are a pod per node requesting, every 200 ms, each echo pod at
// each of its addresses and the Service, one new connection each, and
// logging "ok URL" or "fail URL".
type watchers struct {
	c     *Cluster
	marks map[string]int // lines of each watcher's log already judged
}

func (w *nodeWorkloads) startWatchers(t *testing.T) *watchers {
	t.Helper()
	var urls []string
	for _, e := range w.echo {
		for _, ip := range e.IPs {
			urls = append(urls, urlFor(ip, "/"))
		}
	}
	var svc struct {
		Spec struct {
			ClusterIPs []string `json:"clusterIPs"`
		} `json:"spec"`
	}
	if err := w.c.KubectlJSON(context.Background(), &svc, "get", "svc", "echo"); err != nil {
		t.Fatal(err)
	}
	for _, ip := range svc.Spec.ClusterIPs {
		urls = append(urls, urlFor(ip, "/"))
	}
	script := `while :; do for u in ` + strings.Join(urls, " ") + `; do if timeout 2 wget -q -O /dev/null $u; then echo "ok $u"; else echo "fail $u"; fi; done; sleep 0.2; done`
	var b strings.Builder
	for _, n := range w.c.Nodes {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata: {name: watch-%[1]s, namespace: default, labels: {app: watch}}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
    - {name: watch, image: %[2]s, command: ["/bin/sh", "-c", %[3]q]}
`, n.Name, BusyboxImage, script)
	}
	applyYAML(t, w.c, b.String())
	if _, err := w.c.Kubectl(context.Background(), "wait", "--for=condition=Ready", "pod", "-l", "app=watch", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	ws := &watchers{c: w.c, marks: map[string]int{}}
	// Every watcher has made its first round of requests.
	waitFor(t, time.Minute, "the watchers' first requests", func() error {
		for _, n := range w.c.Nodes {
			if ok, _, _ := ws.count(t, n.Name); ok < len(urls) {
				return fmt.Errorf("%s: %d requests answered", n.Name, ok)
			}
		}
		return nil
	})
	return ws
}

// count reads node's watcher's log: its answered and failed requests
// after the mark, and the failures.
func (ws *watchers) count(t *testing.T, node string) (ok, failed int, fails []string) {
	t.Helper()
	out, err := ws.c.Kubectl(context.Background(), "logs", "watch-"+node)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, l := range lines {
		if i < ws.marks[node] {
			continue
		}
		switch {
		case strings.HasPrefix(l, "ok "):
			ok++
		case strings.HasPrefix(l, "fail "):
			failed++
			if len(fails) < 10 {
				fails = append(fails, l)
			}
		}
	}
	return ok, failed, fails
}

// mark starts a new period: check judges only the requests after it.
func (ws *watchers) mark(t *testing.T) {
	t.Helper()
	for n := range ws.c.Nodes {
		node := ws.c.Nodes[n].Name
		out, err := ws.c.Kubectl(context.Background(), "logs", "watch-"+node)
		if err != nil {
			t.Fatal(err)
		}
		ws.marks[node] = len(strings.Split(strings.TrimSpace(out), "\n"))
	}
}

// check waits for 20 more answered requests from the watchers on nodes,
// then fails the test if any of theirs failed since the mark; it marks
// anew.
func (ws *watchers) check(t *testing.T, during string, nodes []*Node) {
	t.Helper()
	for _, n := range nodes {
		ok0, _, _ := ws.count(t, n.Name)
		waitFor(t, time.Minute, "20 more requests from "+n.Name+"'s watcher", func() error {
			if ok, _, _ := ws.count(t, n.Name); ok < ok0+20 {
				return fmt.Errorf("%d answered", ok-ok0)
			}
			return nil
		})
		ok, failed, fails := ws.count(t, n.Name)
		t.Logf("during %s: %s's watcher: %d requests answered, %d failed", during, n.Name, ok, failed)
		if failed > 0 {
			t.Errorf("during %s, requests from %s's pod failed: %d of %d: %v", during, n.Name, failed, ok+failed, fails)
		}
	}
	ws.mark(t)
}

func (ws *watchers) delete(t *testing.T) {
	t.Helper()
	if _, err := ws.c.Kubectl(context.Background(), "delete", "pod", "-l", "app=watch", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
}

// nodeState is what a node holds that pods and networks make: links,
// policy rules and kurma's routes, nftables tables, mounts, network
// namespaces, host-local leases under /var/lib/kurma and cgroups.
type nodeState map[string]bool

func snapshotNode(t *testing.T, c *Cluster, n *Node) nodeState {
	t.Helper()
	s := nodeState{}
	out, err := n.Run(context.Background(), "ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			s["link "+name] = true
		}
	}
	// Policy rules and kurma's routes (the spanning Networks').
	for _, args := range [][]string{{"ip", "rule", "show"}, {"ip", "-6", "rule", "show"}, {"ip", "route", "show", "proto", "107"}, {"ip", "-6", "route", "show", "proto", "107"}} {
		if out, err = n.Run(context.Background(), args[0], args[1:]...); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line != "" {
				s[strings.Join(args[:len(args)-1], " ")+" "+strings.Join(strings.Fields(line), " ")] = true
			}
		}
	}
	if out, err = n.Run(context.Background(), "nft", "list", "tables"); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" {
			s["nftables "+line] = true
		}
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", n.holder.pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			s["mount "+f[4]] = true
		}
	}
	for _, d := range []string{"/run/netns", "/run/kurma/netns"} {
		entries, _ := os.ReadDir(n.Path(d))
		for _, e := range entries {
			s["netns "+filepath.Join(d, e.Name())] = true
		}
	}
	// The networks' tokens (kurma-node's credentials root).
	_ = filepath.WalkDir(n.Path(credentialsDir), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			s["credentials "+strings.TrimPrefix(p, n.Path(""))] = true
		}
		return nil
	})
	_ = filepath.WalkDir(n.Path("/var/lib/kurma/networks"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && net.ParseIP(e.Name()) != nil {
			s["lease "+p] = true
		}
		return nil
	})
	for _, d := range n.cgroupDirs() {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() && p != d {
				s["cgroup "+p] = true
			}
			return nil
		})
	}
	return s
}

// nodeKept is what kurma leaves on a node by design once uninstalled
// (docs/runtimes.md): its pod bridge and the bridges of the test's
// Networks and NAD (the bridge plugin, like any, leaves its bridge), and
// the shared binds prepare-host made of /run/kurma and /run/netns.
var nodeKept = map[string]bool{"link kurma0": true, "link " + objBridge: true, "link " + spreadBridge: true, "link " + apartBridge: true,
	"link " + nadBridge: true, "link " + polnetBridge: true, "link " + opennetBridge: true, "mount /run/kurma": true, "mount /run/netns": true}

// since lists what s has that before had not, less nodeKept.
func (s nodeState) since(before nodeState) []string {
	return s.sinceKeeping(before, nodeKept)
}

// sinceKeeping lists what s has that before had not, less kept.
func (s nodeState) sinceKeeping(before nodeState, kept map[string]bool) []string {
	var out []string
	for k := range s {
		if !before[k] && !kept[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// checkCleanupNode: once kurma is uninstalled, deploy/kubernetes/cleanup-node.sh
// run on each node (naming the bridges of the test's Networks and NAD)
// removes what kurma leaves by design: the bridges, prepare-host's bind of
// /run/kurma, and what /var/lib/kurma holds. Only /run/netns's shared
// bind stays (the runtimes' directory).
func checkCleanupNode(t *testing.T, s *stepper, c *Cluster, before map[string]nodeState) {
	t.Helper()
	s.step("deploy/kubernetes/cleanup-node.sh on every node: what kurma leaves by design goes too")
	script := filepath.Join(repo(t), "deploy/kubernetes/cleanup-node.sh")
	for _, n := range c.Nodes {
		out, err := n.Run(context.Background(), "sh", script, objBridge, spreadBridge, apartBridge, nadBridge, polnetBridge, opennetBridge)
		t.Logf("%s: cleanup-node.sh:\n%s", n.Name, strings.TrimSpace(out))
		if err != nil {
			t.Errorf("%s: %v", n.Name, err)
		}
		for _, leak := range snapshotNode(t, c, n).sinceKeeping(before[n.Name], map[string]bool{"mount /run/netns": true}) {
			t.Errorf("%s: left behind after cleanup-node.sh: %s", n.Name, leak)
		}
		if entries, err := os.ReadDir(n.Path("/var/lib/kurma")); err != nil && !errors.Is(err, os.ErrNotExist) || len(entries) > 0 {
			t.Errorf("%s: /var/lib/kurma after cleanup-node.sh: %d entries (%v)", n.Name, len(entries), err)
		}
	}
}

// hubMTU is the MTU of the nodes' eth0s.
const hubMTU = 1500

// checkPathMTU: from client's network namespace (this machine's ping), the
// largest packet the path to ip takes crosses with DF set, one byte more
// is refused. Over IPv4 that is the pod's MTU, flannel's (eth0's less
// vxlan's 50 bytes). Over IPv6 flannel's vxlan device runs on the nodes'
// IPv6 addresses, 70 bytes of headers, yet takes the same MTU as the IPv4
// one (upstream flannel's choice, the same on the direct side): the path
// is 20 bytes short of the pod's MTU, and the node tells the pod so (path
// MTU discovery: the first larger packet is answered by "packet too big").
func checkPathMTU(t *testing.T, w *nodeWorkloads, side string, node *Node, client podInfo, ip, mtu string) {
	t.Helper()
	m, err := strconv.Atoi(mtu)
	if err != nil {
		t.Fatalf("%s: %s's eth0 MTU %q", side, client.Name, mtu)
	}
	hdr, path := 28, m // IPv4 + ICMP
	if ipFamily(ip) == "6" {
		hdr, path = 48, min(m, hubMTU-70)
	}
	pid := containerPID(t, w.c, node, client.Name)
	ping := func(size int) error {
		out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "ping", "-M", "do", "-c", "1", "-W", "3", "-s", strconv.Itoa(size), ip).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := ping(path - hdr); err != nil {
		t.Errorf("%s: %s → %s: a %d-byte packet (pod MTU %d) with DF: %v", side, client.Name, ip, path, m, err)
	}
	if err := ping(path - hdr + 1); err == nil {
		t.Errorf("%s: %s → %s: a %d-byte packet with DF crossed a %d-byte path", side, client.Name, ip, path+1, path)
	}
}

// containerPID is the PID of pod's first container (on node).
func containerPID(t *testing.T, c *Cluster, node *Node, pod string) int {
	t.Helper()
	var p struct {
		Status struct {
			ContainerStatuses []struct {
				ContainerID string `json:"containerID"`
			} `json:"containerStatuses"`
		} `json:"status"`
	}
	if err := c.KubectlJSON(context.Background(), &p, "get", "pod", pod); err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container", pod)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	out, err := node.Ctr(context.Background(), "task", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no task %s (pod %s) on %s:\n%s", id, pod, node.Name, out)
	return 0
}

// remoteAddr is an address as busybox httpd's CGI shows it
// ("[::ffff:10.244.0.2]", "[fd00:10:244::2]"): the plain address.
func remoteAddr(s string) string {
	return strings.TrimPrefix(strings.Trim(s, "[]"), "::ffff:")
}

func cidrContains(cidr, ip string) bool {
	_, n, err := net.ParseCIDR(cidr)
	return err == nil && n.Contains(net.ParseIP(ip))
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// delete deletes the workloads and waits until they are gone.
func (w *nodeWorkloads) delete(t *testing.T) {
	t.Helper()
	for _, args := range [][]string{{"deploy/echo", "svc/echo", "svc/echo-np"}, {"pod", "-l", "app=client"}} {
		if _, err := w.c.Kubectl(context.Background(), append(append([]string{"delete"}, args...), "--wait=true", "--timeout=3m")...); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Minute, "the workloads' pods to be gone", func() error {
		var list struct{ Items []json.RawMessage }
		if err := w.c.KubectlJSON(context.Background(), &list, "get", "pods"); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods", len(list.Items))
		}
		return nil
	})
}

// flannelOnNodes says, for each node, which flanneld runs podnet (its PID
// and start time) and which vxlan device it made (its ifindex): a
// flanneld restarted, or its device made again, reads differently.
func flannelOnNodes(t *testing.T, c *Cluster, kurmactl string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range c.Nodes {
		g := netGens(t, kurmactl, n)["podnet"]
		pid := flanneldOf(g.Pid)
		if pid == 0 {
			t.Fatalf("%s: no flanneld under podnet %+v", n.Name, g)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("%s: flanneld %d: %v", n.Name, pid, err)
		}
		st := string(stat)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
		desc := fmt.Sprintf("flanneld %d started %s", pid, f[19])
		for _, dev := range []string{"flannel.1"} { // kurma's flannel config is vxlan over IPv4
			js, err := n.Run(context.Background(), "ip", "-j", "link", "show", "dev", dev)
			if err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			var links []struct {
				Ifindex int `json:"ifindex"`
			}
			if err := json.Unmarshal([]byte(js), &links); err != nil || len(links) != 1 {
				t.Fatalf("%s: ip link show %s: %v: %s", n.Name, dev, err, js)
			}
			desc += fmt.Sprintf(", %s ifindex %d", dev, links[0].Ifindex)
		}
		out[n.Name] = desc
	}
	return out
}
