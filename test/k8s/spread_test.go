package k8stest

// Issue 40's checks: the cluster network as a Network object, Networks
// across the nodes (spec.scope cluster with a subnet), Multus'
// NetworkAttachmentDefinitions and annotation.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// Bridges of this file's networks: the bridge plugin leaves its bridge
// (nodeKept).
const (
	spreadBridge = "kurma3"
	apartBridge  = "kurma4"
	nadBridge    = "kurma5"
)

// networkStatus is a Network as the tests read it.
type networkStatus struct {
	Metadata struct {
		Name              string   `json:"name"`
		Generation        int64    `json:"generation"`
		DeletionTimestamp string   `json:"deletionTimestamp"`
		Finalizers        []string `json:"finalizers"`
	} `json:"metadata"`
	Spec struct {
		ClusterNetwork bool   `json:"clusterNetwork"`
		Scope          string `json:"scope"`
		Subnet         string `json:"subnet"`
	} `json:"spec"`
	Status struct {
		Running *int       `json:"running"`
		Failing *int       `json:"failing"`
		Pods    *int       `json:"pods"`
		Nodes   []netEntry `json:"nodes"`
	} `json:"status"`
}

// netEntry is a node's entry of a Network's status.
type netEntry struct {
	Node, State, Reason, Block, Address string
	Generation                          int
	ObservedGeneration                  int64 `json:"observedGeneration"`
	Pods                                *int  `json:"pods"`
}

// getNetwork reads Network name; a nil Network when it is gone.
func getNetwork(c *Cluster, name string) (*networkStatus, error) {
	var n networkStatus
	err := c.KubectlJSON(context.Background(), &n, "get", "networks.kurma.dev", name)
	if err != nil && strings.Contains(err.Error(), "NotFound") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// checkClusterNetwork: the cluster network is a Network object, podnet,
// marked so, running on every node with an entry of its own each, and
// `kubectl get networks -o wide` lists it with its counts and generation.
func checkClusterNetwork(t *testing.T, s *stepper, c *Cluster) {
	s.step("kubectl get networks: the cluster network, podnet, running on every node")
	waitFor(t, 2*time.Minute, "podnet running on every node in its status", func() error {
		n, err := getNetwork(c, "podnet")
		if err != nil || n == nil {
			return fmt.Errorf("podnet: %v (gone: %v)", err, n == nil)
		}
		if !n.Spec.ClusterNetwork {
			return errors.New("podnet is not marked spec.clusterNetwork")
		}
		if n.Status.Running == nil || *n.Status.Running != len(c.Nodes) || n.Status.Failing == nil || *n.Status.Failing != 0 {
			return fmt.Errorf("running %v failing %v, want %d and 0", deref(n.Status.Running), deref(n.Status.Failing), len(c.Nodes))
		}
		for _, node := range c.Nodes {
			if !slices.ContainsFunc(n.Status.Nodes, func(e netEntry) bool {
				return e.Node == node.Name && e.State == "running" && e.ObservedGeneration == n.Metadata.Generation
			}) {
				return fmt.Errorf("no running entry of %s for generation %d: %+v", node.Name, n.Metadata.Generation, n.Status.Nodes)
			}
		}
		return nil
	})
	out, err := c.Kubectl(context.Background(), "get", "networks", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get networks -o wide:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if head := strings.Fields(lines[0]); !slices.Equal(head[:6], []string{"NAME", "SCOPE", "CLUSTER-NETWORK", "RUNNING", "FAILING", "GENERATION"}) {
		t.Errorf("kubectl get networks -o wide heads %q", head)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); f[0] == "podnet" && (f[2] != "true" || f[3] != fmt.Sprint(len(c.Nodes)) || f[4] != "0") {
			t.Errorf("podnet's line %q: want the cluster network, running on %d nodes, failing on none", l, len(c.Nodes))
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// spanNetwork is a Network of scope cluster on subnet over bridge: each
// node's pods on its block, a route to the whole subnet in the pod.
func spanNetwork(name, subnet, bridge string) string {
	return fmt.Sprintf(`apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: %s}
spec:
  image: file:///opt/kurma/images/cni-netplugin.aci
  scope: cluster
  subnet: %s
  blockSize: 24
  config:
    cniVersion: "1.0.0"
    type: bridge
    bridge: %s
    isGateway: true
    ipam: {type: host-local, ranges: [[{subnet: __NODE_BLOCK__}]], routes: [{dst: __NETWORK_SUBNET__}]}
`, name, subnet, bridge)
}

// echoPodOn is a pod on node serving echoScript (/, /cgi-bin/ip), with
// annotations.
func echoPodOn(ns, name, node string, annotations map[string]string) string {
	b, _ := json.Marshal(annotations)
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {kurma-test: spread}
  annotations: %s
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
    - name: echo
      image: %s
      command: ["/bin/sh", "-c", "%s"]
`, name, ns, b, node, BusyboxImage, echoScript)
}

// ifaceAddr is pod's IPv4 address on ifname (namespace ns), "" when none.
func ifaceAddr(c *Cluster, ns, pod, ifname string) (string, error) {
	out, err := c.Kubectl(context.Background(), "-n", ns, "exec", pod, "--", "ip", "-4", "-o", "addr", "show", "dev", ifname)
	if err != nil {
		return "", err
	}
	if f := strings.Fields(out); len(f) >= 4 {
		a, _, _ := strings.Cut(f[3], "/")
		return a, nil
	}
	return "", fmt.Errorf("no IPv4 address on %s: %s", ifname, out)
}

// podGet is what pod (default namespace) gets from url, and whether it
// got an answer at all within 5 s.
func podGet(c *Cluster, pod, url string) (string, error) {
	out, err := c.Kubectl(context.Background(), "exec", pod, "--", "timeout", "5", "wget", "-q", "-O", "-", url)
	return strings.TrimSpace(out), err
}

// checkSpreadNetworks: two Networks of scope cluster, spread and apart:
// each node takes a block of each subnet, no two nodes one block; a pod of
// spread on each node has its net1 address in its node's block and
// reaches the others' pods of spread at theirs, which see its own address;
// a pod of apart reaches the pods of apart across the nodes but none of
// spread's. Deleting spread with its pods attached leaves it deleting,
// each node counting its pod, until they are gone; then no node routes its
// blocks any more.
func checkSpreadNetworks(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	s.step("two Networks across the nodes (scope cluster): a block per node of each subnet")
	applyYAML(t, c, spanNetwork("spread", "10.77.0.0/16", spreadBridge)+"---\n"+spanNetwork("apart", "10.78.0.0/16", apartBridge))
	blocks := map[string]map[string]string{} // network → node → block
	for _, name := range []string{"spread", "apart"} {
		waitFor(t, 3*time.Minute, name+" running on every node, each with a block", func() error {
			n, err := getNetwork(c, name)
			if err != nil || n == nil {
				return fmt.Errorf("%v (gone: %v)", err, n == nil)
			}
			got := map[string]string{}
			for _, e := range n.Status.Nodes {
				if e.State != "running" || e.Block == "" {
					return fmt.Errorf("%s: %s, block %q (%s)", e.Node, e.State, e.Block, e.Reason)
				}
				if !cidrContains(n.Spec.Subnet, strings.TrimSuffix(e.Block, "/24")) {
					return fmt.Errorf("%s's block %s is not in %s", e.Node, e.Block, n.Spec.Subnet)
				}
				got[e.Node] = e.Block
			}
			if len(got) != len(c.Nodes) {
				return fmt.Errorf("entries %+v", n.Status.Nodes)
			}
			blocks[name] = got
			return nil
		})
		seen := map[string]string{}
		for node, b := range blocks[name] {
			if other, dup := seen[b]; dup {
				t.Errorf("%s: nodes %s and %s hold one block %s", name, other, node, b)
			}
			seen[b] = node
		}
	}
	t.Logf("blocks: %v", blocks)

	s.step("a pod of spread and one of apart on each node")
	for _, n := range c.Nodes {
		applyYAML(t, c, echoPodOn("default", "spread-"+n.Name, n.Name, map[string]string{"kurma.dev/networks": "spread"})+
			"---\n"+echoPodOn("default", "apart-"+n.Name, n.Name, map[string]string{"kurma.dev/networks": "apart"}))
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "pod", "-l", "kurma-test=spread", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{} // pod → its net1 address
	for _, n := range c.Nodes {
		for _, net := range []string{"spread", "apart"} {
			pod := net + "-" + n.Name
			a, err := ifaceAddr(c, "default", pod, "net1")
			if err != nil {
				t.Fatalf("%s: %v", pod, err)
			}
			if b := blocks[net][n.Name]; !cidrContains(b, a) {
				t.Errorf("%s's net1 %s is not in %s's block %s of %s", pod, a, n.Name, b, net)
			}
			addr[pod] = a
		}
	}

	s.step("across the nodes, over net1: spread reaches spread with its own address, apart reaches apart, never spread")
	for _, from := range c.Nodes {
		for _, to := range c.Nodes {
			if to == from {
				continue
			}
			for _, net := range []string{"spread", "apart"} {
				client, server := net+"-"+from.Name, net+"-"+to.Name
				seen, err := podGet(c, client, urlFor(addr[server], "/cgi-bin/ip"))
				if err != nil || remoteAddr(seen) != addr[client] {
					t.Errorf("%s (%s) → %s (%s) at %s: %q (%v); want the server to see the client's own %s", client, from.Name, server, to.Name, addr[server], seen, err, addr[client])
				}
			}
			if body, err := podGet(c, "apart-"+from.Name, urlFor(addr["spread-"+to.Name], "/")); err == nil {
				t.Errorf("apart-%s reached spread-%s at %s: %q; spread is closed to other networks' pods", from.Name, to.Name, addr["spread-"+to.Name], body)
			}
		}
	}

	s.step("spread deleted while its pods hold it: it stays, deleting, counting them per node, until they go")
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "spread", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	checkDeleting(t, c, "spread", 1)
	if out, err := c.Kubectl(ctx, "get", "networks", "spread", "-o", "wide"); err != nil {
		t.Errorf("kubectl get networks spread while deleting: %v", err)
	} else {
		t.Logf("kubectl get networks spread -o wide, deleting:\n%s", out)
	}
	// Its pods keep working across the nodes meanwhile.
	a, b := c.Nodes[0].Name, c.Nodes[1].Name
	if seen, err := podGet(c, "spread-"+a, urlFor(addr["spread-"+b], "/cgi-bin/ip")); err != nil || remoteAddr(seen) != addr["spread-"+a] {
		t.Errorf("spread-%s → spread-%s while spread is deleting: %q (%v)", a, b, seen, err)
	}
	if _, err := c.Kubectl(ctx, "delete", "pod", "-l", "kurma-test=spread", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "spread gone once its last pod went", func() error {
		n, err := getNetwork(c, "spread")
		if err != nil {
			return err
		}
		if n != nil {
			return fmt.Errorf("still there: finalizers %v, pods %v, nodes %+v", n.Metadata.Finalizers, deref(n.Status.Pods), n.Status.Nodes)
		}
		return nil
	})
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "apart", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitFor(t, time.Minute, n.Name+": no route or rule of the spanning networks", func() error {
			out, err := n.Run(ctx, "sh", "-c", "ip route show proto 107; ip rule show | grep -e 10.77. -e 10.78. || true")
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != "" {
				return fmt.Errorf("left: %s", out)
			}
			return nil
		})
	}
}

// checkDeleting waits for Network name to be deleting on every node, each
// entry counting perNode pods, the object perNode × nodes, its finalizers
// one per node.
func checkDeleting(t *testing.T, c *Cluster, name string, perNode int) {
	t.Helper()
	waitFor(t, 2*time.Minute, name+" deleting, its pods counted per node", func() error {
		n, err := getNetwork(c, name)
		if err != nil || n == nil {
			return fmt.Errorf("%v (gone: %v)", err, n == nil)
		}
		if n.Metadata.DeletionTimestamp == "" {
			return errors.New("no deletionTimestamp")
		}
		for _, node := range c.Nodes {
			i := slices.IndexFunc(n.Status.Nodes, func(e netEntry) bool {
				return e.Node == node.Name
			})
			if i < 0 {
				return fmt.Errorf("no entry of %s", node.Name)
			}
			if e := n.Status.Nodes[i]; e.State != "deleting" || e.Pods == nil || *e.Pods != perNode {
				return fmt.Errorf("%s: %s with %v pods, want deleting with %d", node.Name, e.State, deref(e.Pods), perNode)
			}
			if !slices.Contains(n.Metadata.Finalizers, "node.kurma.dev/"+node.Name) {
				return fmt.Errorf("finalizers %v lack %s's", n.Metadata.Finalizers, node.Name)
			}
		}
		if n.Status.Pods == nil || *n.Status.Pods != perNode*len(c.Nodes) {
			return fmt.Errorf("status.pods %v, want %d", deref(n.Status.Pods), perNode*len(c.Nodes))
		}
		return nil
	})
}

// multusCRD is the NetworkAttachmentDefinition CRD as a cluster running
// Multus has it (group, names and the spec.config string Multus reads).
const multusCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: network-attachment-definitions.k8s.cni.cncf.io}
spec:
  group: k8s.cni.cncf.io
  scope: Namespaced
  names: {plural: network-attachment-definitions, singular: network-attachment-definition, kind: NetworkAttachmentDefinition, shortNames: [net-attach-def]}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                config: {type: string}
`

// nadObjects are a namespace and a NetworkAttachmentDefinition written for
// Multus: a bridge with host-local, its config a JSON string.
const nadObjects = `apiVersion: v1
kind: Namespace
metadata: {name: kt-multus}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: bridge-conf, namespace: kt-multus}
spec:
  config: '{"cniVersion": "0.3.1", "name": "bridge-conf", "type": "bridge", "bridge": "` + nadBridge + `", "isGateway": true, "ipam": {"type": "host-local", "subnet": "10.79.0.0/16"}}'
`

// checkMultus: with Multus' CRD in the cluster, a NetworkAttachmentDefinition
// written for Multus serves the pods that name it in Multus' annotation on
// every node: by name in its namespace (net1), by namespace/name in Multus'
// JSON form from another (its interface), both in its subnet, their
// network-status naming it as Multus does; a pod naming a NAD that does not
// exist fails its sandbox, with a NetworkNotFound Event naming it.
func checkMultus(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	s.step("Multus' NetworkAttachmentDefinition CRD and a NAD written for Multus")
	applyYAML(t, c, multusCRD)
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "crd/network-attachment-definitions.k8s.cni.cncf.io", "--timeout=1m"); err != nil {
		t.Fatal(err)
	}
	applyYAML(t, c, nadObjects)
	_, nadNet, _ := net.ParseCIDR("10.79.0.0/16")
	s.step("pods naming the NAD in Multus' annotation, on every node")
	for _, n := range c.Nodes {
		applyYAML(t, c, echoPodOn("kt-multus", "mpod-"+n.Name, n.Name, map[string]string{"k8s.v1.cni.cncf.io/networks": "bridge-conf"})+"---\n"+
			echoPodOn("default", "mjson-"+n.Name, n.Name, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name": "bridge-conf", "namespace": "kt-multus", "interface": "data1"}]`}))
	}
	for _, ns := range []string{"kt-multus", "default"} {
		if _, err := c.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "pod", "-l", "kurma-test=spread", "--timeout=3m"); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		for _, p := range []struct{ ns, pod, ifname string }{{"kt-multus", "mpod-" + n.Name, "net1"}, {"default", "mjson-" + n.Name, "data1"}} {
			a, err := ifaceAddr(c, p.ns, p.pod, p.ifname)
			if err != nil || !nadNet.Contains(net.ParseIP(a)) {
				t.Errorf("%s/%s's %s: %q (%v), want an address of the NAD's 10.79.0.0/16", p.ns, p.pod, p.ifname, a, err)
			}
			waitFor(t, time.Minute, p.pod+"'s network-status naming the NAD", func() error {
				var pod struct {
					Metadata struct {
						Annotations map[string]string `json:"annotations"`
					} `json:"metadata"`
				}
				if err := c.KubectlJSON(ctx, &pod, "-n", p.ns, "get", "pod", p.pod); err != nil {
					return err
				}
				var st []struct{ Name, Interface string }
				raw := pod.Metadata.Annotations["k8s.v1.cni.cncf.io/network-status"]
				if err := json.Unmarshal([]byte(raw), &st); err != nil || len(st) != 2 || st[1].Name != "kt-multus/bridge-conf" || st[1].Interface != p.ifname {
					return fmt.Errorf("network-status %s", raw)
				}
				return nil
			})
		}
	}

	s.step("a pod naming a NAD that does not exist: an Event, and no sandbox")
	applyYAML(t, c, echoPodOn("kt-multus", "mnone", c.Nodes[0].Name, map[string]string{"k8s.v1.cni.cncf.io/networks": "no-such-conf"}))
	waitFor(t, 2*time.Minute, "the NetworkNotFound Event on mnone", func() error {
		var events struct {
			Items []struct{ Reason, Message string } `json:"items"`
		}
		if err := c.KubectlJSON(ctx, &events, "-n", "kt-multus", "get", "events", "--field-selector", "involvedObject.name=mnone"); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "NetworkNotFound" && strings.Contains(e.Message, "no NetworkAttachmentDefinition kt-multus/no-such-conf") {
				return nil
			}
		}
		return fmt.Errorf("events %+v", events.Items)
	})

	s.step("the NAD's pods, namespace and CRD deleted")
	if _, err := c.Kubectl(ctx, "delete", "pod", "-l", "kurma-test=spread", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "delete", "namespace", "kt-multus", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "delete", "crd", "network-attachment-definitions.k8s.cni.cncf.io", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
}

// waitNoFinalizers waits until no Network carries a node's finalizer: no
// node's pods hold one (before kurma is deleted: its kurma-nodes take
// them off).
func waitNoFinalizers(t *testing.T, c *Cluster) {
	t.Helper()
	waitFor(t, 2*time.Minute, "no node's finalizer on any Network", func() error {
		var list struct {
			Items []networkStatus `json:"items"`
		}
		if err := c.KubectlJSON(context.Background(), &list, "get", "networks.kurma.dev"); err != nil {
			return err
		}
		for _, n := range list.Items {
			if len(n.Metadata.Finalizers) > 0 {
				return fmt.Errorf("%s: %v", n.Metadata.Name, n.Metadata.Finalizers)
			}
		}
		return nil
	})
}
