package k8stest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	out, err := exec.Command(kurmactl, "--socket", kurmadSocket, "net", "ls", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kurmactl net ls: %v", err)
	}
	var gens []kurmadGen
	if err := json.Unmarshal(out, &gens); err != nil {
		t.Fatalf("kurmactl net ls: %v: %s", err, out)
	}
	return gens
}

// kurmadGenerations maps network/generation to its state in kurmad.
func kurmadGenerations(t *testing.T, kurmactl string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, g := range kurmadGens(t, kurmactl) {
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
// its network run on the node without restarting kurma's pod, and says so
// in its status; a pod of an allowed namespace joins it as a second
// interface with the name and IP it asks for (multus' JSON form), eth0
// staying the cluster network, and its network-status annotation lists
// both; a pod of another namespace is refused with an Event naming the
// network and its rule; an edit of the object's config moves new pods to
// a new generation while the old pod keeps its own and keeps answering;
// deleting the object with pods attached keeps them working, and once
// they go nothing of the network stays in kurmad.
func checkNetworkObjects(t *testing.T, s *stepper, c *Cluster, kurmactl string) {
	ctx := context.Background()
	node := c.Nodes[0].Name
	kurmadBefore := kurmadPod(t, c)

	s.step("a Network object: it runs on the node, no kurma pod restarted")
	applyYAML(t, c, objNamespaces)
	applyYAML(t, c, objnet(1500))
	waitFor(t, 2*time.Minute, "objnet running on the node in its status", func() error {
		state, gen, running, err := objStatus(t, c, node)
		if err != nil {
			return err
		}
		if state != "running" || gen < 1 || running != 1 {
			return fmt.Errorf("state %q generation %d running %d", state, gen, running)
		}
		return nil
	})
	if out, err := c.Kubectl(ctx, "get", "networks.kurma.dev"); err == nil {
		t.Logf("kubectl get networks.kurma.dev:\n%s", out)
	}
	if p := kurmadPod(t, c); p != kurmadBefore {
		t.Errorf("kurma's pod changed from %s to %s: the Network needed a restart", kurmadBefore, p)
	}

	checkDeletedNodePruned(t, s, c)

	s.step("a pod of the allowed namespace joins objnet as data0 at the IP it asks for")
	applyYAML(t, c, objPod("kt-allowed", "joiner", `[{"name": "objnet", "interface": "data0", "ips": ["172.31.5.5/16"]}]`))
	if _, err := c.Kubectl(ctx, "-n", "kt-allowed", "wait", "--for=condition=Ready", "pod/joiner", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	addr, mtu, err := nsPodIface(c, "kt-allowed", "joiner", "data0")
	if err != nil || addr != "172.31.5.5" || mtu != 1500 {
		t.Errorf("joiner's data0: %s mtu %d (%v), want 172.31.5.5 mtu 1500", addr, mtu, err)
	}
	_, cidr, _ := net.ParseCIDR(c.PodCIDR)
	if a, _, err := nsPodIface(c, "kt-allowed", "joiner", "eth0"); err != nil || !addrIn(a, cidr) {
		t.Errorf("joiner's eth0 %q (%v): want the cluster network's, in %s", a, err, c.PodCIDR)
	}
	waitFor(t, time.Minute, "joiner's network-status annotation", func() error {
		var p struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := c.KubectlJSON(ctx, &p, "-n", "kt-allowed", "get", "pod", "joiner"); err != nil {
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
			st[1].Name != "objnet" || st[1].Interface != "data0" || !slices.Equal(st[1].IPs, []string{"172.31.5.5"}) || st[1].Default {
			return fmt.Errorf("network-status %s", raw)
		}
		return nil
	})
	oldURL := "http://172.31.5.5/"
	if body := get(t, oldURL); body != "joiner" {
		t.Errorf("%s answered %q", oldURL, body)
	}

	s.step("a pod of another namespace asking for objnet is refused, with an Event")
	applyYAML(t, c, objPod("kt-other", "outsider", "objnet"))
	waitFor(t, 2*time.Minute, "the NetworkRefused Event on outsider", func() error {
		var events struct {
			Items []struct{ Reason, Message string } `json:"items"`
		}
		if err := c.KubectlJSON(ctx, &events, "-n", "kt-other", "get", "events", "--field-selector", "involvedObject.name=outsider"); err != nil {
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
	if _, ok := kurmadPods(t, kurmactl)["kt-other/outsider"]; ok {
		t.Error("kurmad holds the refused pod")
	}

	s.step("the object's config edited: new pods get a new generation, the old pod keeps its own")
	applyYAML(t, c, objnet(1400))
	waitFor(t, 2*time.Minute, "objnet's generation 2 running in its status", func() error {
		state, gen, _, err := objStatus(t, c, node)
		if err != nil {
			return err
		}
		if state != "running" || gen != 2 {
			return fmt.Errorf("state %q generation %d", state, gen)
		}
		return nil
	})
	if gens := kurmadGenerations(t, kurmactl); gens["objnet/1"] != "retiring" || gens["objnet/2"] != "running" {
		t.Errorf("kurmad's objnet generations %v, want 1 retiring (joiner's) and 2 running", gens)
	}
	applyYAML(t, c, objPod("kt-allowed", "joiner2", `[{"name": "objnet", "ips": ["172.31.5.6/16"]}]`))
	if _, err := c.Kubectl(ctx, "-n", "kt-allowed", "wait", "--for=condition=Ready", "pod/joiner2", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if addr, mtu, err := nsPodIface(c, "kt-allowed", "joiner2", "net1"); err != nil || addr != "172.31.5.6" || mtu != 1400 {
		t.Errorf("joiner2's net1: %s mtu %d (%v), want 172.31.5.6 mtu 1400 (the edited config)", addr, mtu, err)
	}
	if _, mtu, err := nsPodIface(c, "kt-allowed", "joiner", "data0"); err != nil || mtu != 1500 {
		t.Errorf("joiner's data0 mtu %d (%v), want 1500 still", mtu, err)
	}
	if body := get(t, oldURL); body != "joiner" {
		t.Errorf("%s answered %q after the edit", oldURL, body)
	}
	if body := get(t, "http://172.31.5.6/"); body != "joiner2" {
		t.Errorf("joiner2 answered %q", body)
	}

	s.step("the object deleted with pods attached: they keep working until they go, then nothing is left")
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "objnet", "--wait=true"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "objnet's generations retiring in kurmad", func() error {
		gens := kurmadGenerations(t, kurmactl)
		if gens["objnet/1"] != "retiring" || gens["objnet/2"] != "retiring" {
			return fmt.Errorf("generations %v", gens)
		}
		return nil
	})
	for _, u := range []string{oldURL, "http://172.31.5.6/"} {
		if _, err := fetch(u); err != nil {
			t.Errorf("after the delete: %v", err)
		}
	}
	if _, err := c.Kubectl(ctx, "delete", "namespace", "kt-allowed", "kt-other", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "objnet gone from kurmad", func() error {
		for g := range kurmadGenerations(t, kurmactl) {
			if strings.HasPrefix(g, "objnet/") {
				return fmt.Errorf("generations %v", kurmadGenerations(t, kurmactl))
			}
		}
		for name := range kurmadPods(t, kurmactl) {
			if strings.HasPrefix(name, "kt-") {
				return fmt.Errorf("kurmad still holds pod %s", name)
			}
		}
		return nil
	})
	if ports, _ := os.ReadDir("/sys/class/net/" + objBridge + "/brif"); len(ports) > 0 {
		t.Errorf("%d veths left on %s", len(ports), objBridge)
	}
}

// peakRSS is the VmHWM of the processes running prog (its path in
// kurma's image, which no other process of the machine has), for the
// manifest's memory limit.
func peakRSS(prog string) string {
	dirs, _ := os.ReadDir("/proc")
	var out []string
	for _, d := range dirs {
		cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !strings.HasPrefix(string(cmd), prog+"\x00") {
			continue
		}
		st, _ := os.ReadFile("/proc/" + d.Name() + "/status")
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				out = append(out, "pid "+d.Name()+" "+strings.Join(strings.Fields(l)[1:], " "))
			}
		}
	}
	if len(out) == 0 {
		return "no process"
	}
	return strings.Join(out, ", ")
}

// checkNetworkOnEveryNode: a Network applied to a running cluster runs
// on every node (no kurma pod restarted): one status entry per node, all
// running, and status.running counts them. (The single-node test follows
// a Network through an edit and a delete.)
func checkNetworkOnEveryNode(t *testing.T, c *Cluster) {
	ctx := context.Background()
	before := kurmadPodsByNode(t, c)
	applyYAML(t, c, objnet(1500))
	waitFor(t, 3*time.Minute, "objnet running on every node", func() error {
		var o networkObject
		if err := c.KubectlJSON(ctx, &o, "get", "networks.kurma.dev", "objnet"); err != nil {
			return err
		}
		running := map[string]bool{}
		for _, n := range o.Status.Nodes {
			running[n.Node] = n.State == "running"
		}
		for _, n := range c.Nodes {
			if !running[n.Name] {
				return fmt.Errorf("nodes %+v", o.Status.Nodes)
			}
		}
		if o.Status.Running == nil || *o.Status.Running != len(c.Nodes) {
			return fmt.Errorf("running %v, want %d", o.Status.Running, len(c.Nodes))
		}
		return nil
	})
	if out, err := c.Kubectl(ctx, "get", "networks.kurma.dev"); err == nil {
		t.Logf("kubectl get networks.kurma.dev:\n%s", out)
	}
	if after := kurmadPodsByNode(t, c); !equalMaps(after, before) {
		t.Errorf("kurma's pods %v, were %v: the Network needed a restart", after, before)
	}
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "objnet", "--wait=true"); err != nil {
		t.Fatal(err)
	}
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
	entryIs("objnet counting "+gone+" while its Node exists", "running", 2)
	if _, err := c.Kubectl(ctx, "delete", "node", gone, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	entryIs(gone+"'s entry pruned from objnet's status", "", 1)
	if state, _, _, err := objStatus(t, c, c.Nodes[0].Name); err != nil || state != "running" {
		t.Errorf("%s's own entry after the pruning: %q (%v)", c.Nodes[0].Name, state, err)
	}
}
