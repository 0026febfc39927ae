package k8stest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// objnet is the Network object the test makes: a bridge on the node with
// host-local in objSubnet that takes a pod's IP (the ips capability),
// open to the namespaces labelled kurma-test=allowed.
const (
	objSubnet = "172.31.0.0/16"
	objBridge = "kurma2"
)

func objnet(mtu int) string {
	return fmt.Sprintf(`apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: objnet}
spec:
  image: file:///opt/kurma/images/cni-netplugin.aci
  namespaceSelector: {matchLabels: {kurma-test: allowed}}
  config:
    cniVersion: "1.0.0"
    type: bridge
    bridge: %s
    isGateway: true
    mtu: %d
    capabilities: {ips: true}
    ipam: {type: host-local, ranges: [[{subnet: %q}]]}
`, objBridge, mtu, objSubnet)
}

const objNamespaces = `apiVersion: v1
kind: Namespace
metadata: {name: kt-allowed, labels: {kurma-test: allowed}}
---
apiVersion: v1
kind: Namespace
metadata: {name: kt-other}
`

// objPod is a pod of namespace ns asking for objnet with annotation.
func objPod(ns, name, annotation string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[2]s
  namespace: %[1]s
  annotations: {kurma.dev/networks: '%[3]s'}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: %[4]s
      command: ["/bin/sh", "-c", "hostname > /www/index.html && exec httpd -f -p 80 -h /www"]
`, ns, name, annotation, BusyboxImage)
}

// networkObject is the part of a Network the test reads.
type networkObject struct {
	Status struct {
		Running *int `json:"running"`
		Nodes   []struct {
			Node, State, Reason, Image string
			Generation                 int
		} `json:"nodes"`
	} `json:"status"`
}

// objStatus is objnet's status entry of node, "" state when none.
func objStatus(t *testing.T, c *Cluster, node string) (state string, gen int, running int, err error) {
	var o networkObject
	if err := c.KubectlJSON(context.Background(), &o, "get", "networks.kurma.dev", "objnet"); err != nil {
		return "", 0, 0, err
	}
	if o.Status.Running != nil {
		running = *o.Status.Running
	}
	for _, n := range o.Status.Nodes {
		if n.Node == node {
			return n.State, n.Generation, running, nil
		}
	}
	return "", 0, running, nil
}

// kurmadGen is a generation as `kurmactl net ls -o json` shows it.
type kurmadGen struct {
	Network    string `json:"network"`
	Generation int    `json:"generation"`
	State      string `json:"state"`
}

// kurmadGens are kurmad's generations, asked on the node's socket.
func kurmadGens(t *testing.T, kurmactl string) []kurmadGen {
	t.Helper()
	return kurmadGensAt(t, kurmactl, kurmadSocket)
}

// kurmadGensAt are the generations of the kurmad serving socket.
func kurmadGensAt(t *testing.T, kurmactl, socket string) []kurmadGen {
	t.Helper()
	out, err := exec.Command(kurmactl, "--socket", socket, "net", "ls", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kurmactl net ls: %v", err)
	}
	var gens []kurmadGen
	if err := json.Unmarshal(out, &gens); err != nil {
		t.Fatalf("kurmactl net ls: %v: %s", err, out)
	}
	return gens
}

// kurmadGenerationsAt maps network/generation to its state in the kurmad
// serving socket.
func kurmadGenerationsAt(t *testing.T, kurmactl, socket string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, g := range kurmadGensAt(t, kurmactl, socket) {
		m[fmt.Sprintf("%s/%d", g.Network, g.Generation)] = g.State
	}
	return m
}

// nsPodIface is an interface of a pod in namespace ns: its IPv4 address
// and MTU, as `ip -o link` and `ip -4 -o addr` show them in the pod.
func nsPodIface(c *Cluster, ns, pod, ifname string) (addr string, mtu int, err error) {
	ctx := context.Background()
	out, err := c.Kubectl(ctx, "-n", ns, "exec", pod, "--", "ip", "-4", "-o", "addr", "show", "dev", ifname)
	if err != nil {
		return "", 0, err
	}
	if f := strings.Fields(out); len(f) >= 4 {
		addr, _, _ = strings.Cut(f[3], "/")
	}
	out, err = c.Kubectl(ctx, "-n", ns, "exec", pod, "--", "cat", "/sys/class/net/"+ifname+"/mtu")
	if err != nil {
		return "", 0, err
	}
	_, err = fmt.Sscan(strings.TrimSpace(out), &mtu)
	return addr, mtu, err
}

// checkNetworkObjects: a Network object applied while kurma runs makes
// its network run on every node without restarting kurma's pods, and
// says so in its status, an entry per node; on each node a pod of an
// allowed namespace joins it as a second interface with the name and IP
// it asks for (multus' JSON form), eth0 staying the cluster network, and
// its network-status annotation lists both; a pod of another namespace
// is refused with an Event naming the network and its rule; an edit of
// the object's config moves new pods to a new generation on every node
// while the old pods keep their own and keep answering; deleting the
// object with pods attached keeps them working, and once they go nothing
// of the network stays in any kurmad.
func checkNetworkObjects(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	kurmactl := need(t, filepath.Join(repo(t), "images/out/kurma-bin/kurmactl"), "run make image first")
	kurmadBefore := kurmadPodsByNode(t, c)

	s.step("a Network object: it runs on every node, no kurma pod restarted")
	applyYAML(t, c, objNamespaces)
	applyYAML(t, c, objnet(1500))
	waitObjnet(t, c, "running", 1)
	if out, err := c.Kubectl(ctx, "get", "networks.kurma.dev"); err == nil {
		t.Logf("kubectl get networks.kurma.dev:\n%s", out)
	}
	if p := kurmadPodsByNode(t, c); !equalMaps(p, kurmadBefore) {
		t.Errorf("kurma's pods %v, were %v: the Network needed a restart", p, kurmadBefore)
	}

	checkDeletedNodePruned(t, s, c)

	// On each node (its own objnet bridge and subnet), pods at addresses
	// of their own: 172.31.5.x joins before the edit, 172.31.6.x after.
	ip := func(i, third int) string { return fmt.Sprintf("172.31.%d.%d", third, 10+i) }
	s.step("on each node a pod of the allowed namespace joins objnet as data0 at the IP it asks for")
	for i, n := range c.Nodes {
		applyYAML(t, c, objPodOn("kt-allowed", "joiner-"+n.Name, n.Name, `[{"name": "objnet", "interface": "data0", "ips": ["`+ip(i, 5)+`/16"]}]`))
	}
	for i, n := range c.Nodes {
		pod := "joiner-" + n.Name
		if _, err := c.Kubectl(ctx, "-n", "kt-allowed", "wait", "--for=condition=Ready", "pod/"+pod, "--timeout=3m"); err != nil {
			t.Fatal(err)
		}
		addr, mtu, err := nsPodIface(c, "kt-allowed", pod, "data0")
		if err != nil || addr != ip(i, 5) || mtu != 1500 {
			t.Errorf("%s's data0: %s mtu %d (%v), want %s mtu 1500", pod, addr, mtu, err, ip(i, 5))
		}
		podIP := nsPodIP(t, c, "kt-allowed", pod)
		if a, _, err := nsPodIface(c, "kt-allowed", pod, "eth0"); err != nil || a != podIP {
			t.Errorf("%s's eth0 %q (%v): want the cluster network's, its pod IP %s", pod, a, err, podIP)
		}
		waitFor(t, time.Minute, pod+"'s network-status annotation", func() error {
			return checkNetworkStatus(c, "kt-allowed", pod, ip(i, 5))
		})
		if body := nodeGet(n, ip(i, 5)); body != pod {
			t.Errorf("%s: http://%s/ answered %q, want %s", n.Name, ip(i, 5), body, pod)
		}
	}

	s.step("on each node a pod of another namespace asking for objnet is refused, with an Event")
	for _, n := range c.Nodes {
		applyYAML(t, c, objPodOn("kt-other", "outsider-"+n.Name, n.Name, "objnet"))
	}
	for _, n := range c.Nodes {
		waitRefused(t, c, "outsider-"+n.Name)
		if _, ok := kurmadPodsAt(t, kurmactl, n.Path(kurmadSocket))["kt-other/outsider-"+n.Name]; ok {
			t.Errorf("%s: kurmad holds the refused pod", n.Name)
		}
	}

	s.step("the object's config edited: on every node new pods get a new generation, the old pods keep their own")
	applyYAML(t, c, objnet(1400))
	waitObjnet(t, c, "running", 2)
	for i, n := range c.Nodes {
		if gens := kurmadGenerationsAt(t, kurmactl, n.Path(kurmadSocket)); gens["objnet/1"] != "retiring" || gens["objnet/2"] != "running" {
			t.Errorf("%s: kurmad's objnet generations %v, want 1 retiring (joiner's) and 2 running", n.Name, gens)
		}
		applyYAML(t, c, objPodOn("kt-allowed", "joiner2-"+n.Name, n.Name, `[{"name": "objnet", "ips": ["`+ip(i, 6)+`/16"]}]`))
	}
	for i, n := range c.Nodes {
		pod, old := "joiner2-"+n.Name, "joiner-"+n.Name
		if _, err := c.Kubectl(ctx, "-n", "kt-allowed", "wait", "--for=condition=Ready", "pod/"+pod, "--timeout=3m"); err != nil {
			t.Fatal(err)
		}
		if addr, mtu, err := nsPodIface(c, "kt-allowed", pod, "net1"); err != nil || addr != ip(i, 6) || mtu != 1400 {
			t.Errorf("%s's net1: %s mtu %d (%v), want %s mtu 1400 (the edited config)", pod, addr, mtu, err, ip(i, 6))
		}
		if _, mtu, err := nsPodIface(c, "kt-allowed", old, "data0"); err != nil || mtu != 1500 {
			t.Errorf("%s's data0 mtu %d (%v), want 1500 still", old, mtu, err)
		}
		if body := nodeGet(n, ip(i, 5)); body != old {
			t.Errorf("%s: http://%s/ answered %q after the edit, want %s", n.Name, ip(i, 5), body, old)
		}
		if body := nodeGet(n, ip(i, 6)); body != pod {
			t.Errorf("%s: http://%s/ answered %q, want %s", n.Name, ip(i, 6), body, pod)
		}
	}

	s.step("the object deleted with pods attached: it stays, deleting, counting them per node; they keep working until they go, then nothing is left on any node")
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "objnet", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	checkDeleting(t, c, "objnet", 2) // joiner and joiner2 on each node
	for i, n := range c.Nodes {
		waitFor(t, time.Minute, n.Name+": objnet's generations retiring in kurmad", func() error {
			gens := kurmadGenerationsAt(t, kurmactl, n.Path(kurmadSocket))
			if gens["objnet/1"] != "retiring" || gens["objnet/2"] != "retiring" {
				return fmt.Errorf("generations %v", gens)
			}
			return nil
		})
		for _, a := range []string{ip(i, 5), ip(i, 6)} {
			if body := nodeGet(n, a); !strings.HasSuffix(body, n.Name) {
				t.Errorf("%s: after the delete http://%s/ answered %q", n.Name, a, body)
			}
		}
	}
	if _, err := c.Kubectl(ctx, "delete", "namespace", "kt-allowed", "kt-other", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "objnet gone once its last pod went", func() error {
		if n, err := getNetwork(c, "objnet"); err != nil || n != nil {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	for _, n := range c.Nodes {
		waitFor(t, time.Minute, n.Name+": objnet gone from kurmad", func() error {
			gens := kurmadGenerationsAt(t, kurmactl, n.Path(kurmadSocket))
			for g := range gens {
				if strings.HasPrefix(g, "objnet/") {
					return fmt.Errorf("generations %v", gens)
				}
			}
			for name := range kurmadPodsAt(t, kurmactl, n.Path(kurmadSocket)) {
				if strings.HasPrefix(name, "kt-") {
					return fmt.Errorf("kurmad still holds pod %s", name)
				}
			}
			return nil
		})
		if out, err := n.Run(ctx, "ip", "-o", "link", "show", "master", objBridge); err == nil && strings.TrimSpace(out) != "" {
			t.Errorf("%s: veths left on %s: %s", n.Name, objBridge, out)
		}
	}
}

// objPodOn is objPod on node.
func objPodOn(ns, name, node, annotation string) string {
	return strings.Replace(objPod(ns, name, annotation), "spec:\n", "spec:\n  nodeName: "+node+"\n", 1)
}

// waitObjnet waits for objnet to be in state with generation gen (at
// least, for 1) on every node, and counted so for 1 (running).
func waitObjnet(t *testing.T, c *Cluster, state string, gen int) {
	t.Helper()
	waitFor(t, 3*time.Minute, fmt.Sprintf("objnet %s, generation %d, on every node in its status", state, gen), func() error {
		for _, n := range c.Nodes {
			st, g, running, err := objStatus(t, c, n.Name)
			if err != nil {
				return err
			}
			if st != state || g < gen || (gen > 1 && g != gen) {
				return fmt.Errorf("%s: state %q generation %d", n.Name, st, g)
			}
			if gen == 1 && running != len(c.Nodes) {
				return fmt.Errorf("running %d, want %d", running, len(c.Nodes))
			}
		}
		return nil
	})
}

// nsPodIP is a pod's first status.podIPs.
func nsPodIP(t *testing.T, c *Cluster, ns, pod string) string {
	t.Helper()
	var p struct {
		Status struct {
			PodIP string `json:"podIP"`
		} `json:"status"`
	}
	if err := c.KubectlJSON(context.Background(), &p, "-n", ns, "get", "pod", pod); err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

// checkNetworkStatus: pod's network-status annotation lists podnet as
// eth0 (the default) and objnet as data0 at ip.
func checkNetworkStatus(c *Cluster, ns, pod, ip string) error {
	var p struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := c.KubectlJSON(context.Background(), &p, "-n", ns, "get", "pod", pod); err != nil {
		return err
	}
	raw, ok := p.Metadata.Annotations["k8s.v1.cni.cncf.io/network-status"]
	if !ok {
		return errors.New("no network-status annotation")
	}
	var st []struct {
		Name, Interface string
		IPs             []string `json:"ips"`
		Default         bool
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return fmt.Errorf("%v: %s", err, raw)
	}
	if len(st) != 2 || st[0].Name != "podnet" || st[0].Interface != "eth0" || !st[0].Default ||
		st[1].Name != "objnet" || st[1].Interface != "data0" || !slices.Equal(st[1].IPs, []string{ip}) || st[1].Default {
		return fmt.Errorf("network-status %s", raw)
	}
	return nil
}

// waitRefused waits for the NetworkRefused Event on pod of kt-other and
// its sandbox failure, both naming objnet and its rule.
func waitRefused(t *testing.T, c *Cluster, pod string) {
	t.Helper()
	waitFor(t, 2*time.Minute, "the NetworkRefused Event on "+pod, func() error {
		var events struct {
			Items []struct{ Reason, Message string } `json:"items"`
		}
		if err := c.KubectlJSON(context.Background(), &events, "-n", "kt-other", "get", "events", "--field-selector", "involvedObject.name="+pod); err != nil {
			return err
		}
		refused, failed := false, false
		for _, e := range events.Items {
			if e.Reason == "NetworkRefused" && strings.Contains(e.Message, `network "objnet"`) && strings.Contains(e.Message, "spec.namespaceSelector kurma-test=allowed") {
				refused = true
			}
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, `network "objnet" does not admit pods of namespace "kt-other"`) {
				failed = true
			}
		}
		if !refused || !failed {
			return fmt.Errorf("events %+v", events.Items)
		}
		return nil
	})
}

// nodeGet is the body of http://ip/ asked from node n (its network
// namespace: the pods' second networks are node-local bridges), "" and
// the error's text when it fails.
func nodeGet(n *Node, ip string) string {
	out, err := n.Run(context.Background(), "curl", "-sS", "--max-time", "5", "http://"+ip+"/")
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(out)
}

// checkDeletedNodePruned: a status entry of a Node that is deleted
// leaves objnet's status, and status.running stops counting it. The
// entry is written as another node's kurma-node would (its own field
// manager), for a Node object without a kubelet.
func checkDeletedNodePruned(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	const gone = "kt-gone"
	s.step("a deleted Node's entry leaves objnet's status, and the counts follow")
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "delete", "node", gone, "--ignore-not-found") })
	applyYAML(t, c, "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+gone+"\n")
	entry := `[{"op": "add", "path": "/status/nodes/-", "value": {"node": "` + gone +
		`", "state": "running", "generation": 1, "lastTransitionTime": "2020-01-01T00:00:00Z"}}]`
	if _, err := c.Kubectl(ctx, "patch", "networks.kurma.dev", "objnet", "--subresource=status", "--type=json",
		"--field-manager=kurma-node/"+gone, "-p", entry); err != nil {
		t.Fatal(err)
	}
	entryIs := func(what, state string, running int) {
		t.Helper()
		waitFor(t, time.Minute, what, func() error {
			st, _, r, err := objStatus(t, c, gone)
			if err != nil {
				return err
			}
			if st != state || r != running {
				return fmt.Errorf("%s: state %q, running %d", gone, st, r)
			}
			return nil
		})
	}
	entryIs("objnet counting "+gone+" while its Node exists", "running", len(c.Nodes)+1)
	if _, err := c.Kubectl(ctx, "delete", "node", gone, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	entryIs(gone+"'s entry pruned from objnet's status", "", len(c.Nodes))
	for _, n := range c.Nodes {
		if state, _, _, err := objStatus(t, c, n.Name); err != nil || state != "running" {
			t.Errorf("%s's own entry after the pruning: %q (%v)", n.Name, state, err)
		}
	}
}
