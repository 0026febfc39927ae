package k8stest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The networks of checkPolicyPerNetwork: two node-local bridges, one
// that opted in to NetworkPolicy and one that did not.
const (
	polnetSubnet  = "172.32.0.0/16"
	opennetSubnet = "172.33.0.0/16"
	policyNS      = "kt-policy"
	// Bridges of their own: an earlier check's networks leave theirs
	// with their addresses, which the bridge plugin will not change.
	polnetBridge  = "kurma7"
	opennetBridge = "kurma8"
)

func policyNetworks() string {
	net := func(name, bridge, subnet string, policy bool) string {
		return fmt.Sprintf(`apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: %s}
spec:
  image: file:///opt/kurma/images/cni-netplugin.aci
  networkPolicy: %t
  config:
    cniVersion: "1.0.0"
    type: bridge
    bridge: %s
    isGateway: true
    ipam: {type: host-local, ranges: [[{subnet: %q}]]}
`, name, policy, bridge, subnet)
	}
	return net("polnet", polnetBridge, polnetSubnet, true) + "---\n" + net("opennet", opennetBridge, opennetSubnet, false) +
		"---\napiVersion: v1\nkind: Namespace\nmetadata: {name: " + policyNS + "}\n"
}

// policyPod is a web server on node that joins polnet and opennet
// besides the cluster network, labelled with labels.
func policyPod(name, node, labels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {%s}
  annotations: {kurma.dev/networks: "polnet,opennet"}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: %s
      command: ["/bin/sh", "-c", "hostname > /www/index.html && exec httpd -f -p 80 -h /www"]
`, name, policyNS, labels, node, BusyboxImage)
}

// The policy: the server takes connections only from pods labelled
// role=friend.
const friendsOnly = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: friends-only, namespace: ` + policyNS + `}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
    - from: [{podSelector: {matchLabels: {role: friend}}}]
`

// checkPolicyPerNetwork: NetworkPolicy is enforced per network. A server,
// a client and a friend of the server, all on one node, each join two
// node-local Networks besides the cluster network (which the shipped
// manifest opts in): polnet, which opts in too, and opennet, which does
// not. With no policy the client reaches the server at each of its three
// addresses. With a policy that lets only friends in, the client is
// refused at the server's cluster and polnet addresses and still served at
// its opennet one; the friend is served at all three. The policy deleted,
// the client is served everywhere again.
func checkPolicyPerNetwork(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	node := c.Nodes[0].Name
	s.step("NetworkPolicy per network: polnet opted in, opennet not, pods on %s", node)
	applyYAML(t, c, policyNetworks())
	for _, name := range []string{"polnet", "opennet"} {
		waitFor(t, 2*time.Minute, name+" running on every node", func() error {
			var o networkObject
			if err := c.KubectlJSON(ctx, &o, "get", "networks.kurma.dev", name); err != nil {
				return err
			}
			if o.Status.Running == nil || *o.Status.Running != len(c.Nodes) {
				return fmt.Errorf("status %+v", o.Status)
			}
			return nil
		})
	}
	applyYAML(t, c, policyPod("server", node, "app: server")+"---\n"+policyPod("client", node, "role: stranger")+"---\n"+
		policyPod("friend", node, "role: friend"))
	for _, p := range []string{"server", "client", "friend"} {
		if _, err := c.Kubectl(ctx, "-n", policyNS, "wait", "--for=condition=Ready", "pod/"+p, "--timeout=3m"); err != nil {
			t.Fatal(err)
		}
	}
	addrs := map[string]string{"cluster": nsPodIP(t, c, policyNS, "server")}
	for ifname, net := range map[string]string{"net1": "polnet", "net2": "opennet"} {
		a, _, err := nsPodIface(c, policyNS, "server", ifname)
		if err != nil || a == "" {
			t.Fatalf("the server's %s (%s): %q, %v", ifname, net, a, err)
		}
		addrs[net] = a
	}
	t.Logf("the server's addresses: %v", addrs)
	reach := func(from, net string, want bool) {
		t.Helper()
		waitFor(t, time.Minute, fmt.Sprintf("%s → server at %s (%s) %s", from, addrs[net], net, map[bool]string{true: "served", false: "refused"}[want]), func() error {
			out, err := c.Kubectl(ctx, "-n", policyNS, "exec", from, "--", "timeout", "3", "wget", "-q", "-O", "-", "http://"+addrs[net]+"/")
			served := err == nil && strings.TrimSpace(out) == "server"
			if served != want {
				return fmt.Errorf("served %t (%q, %v)", served, strings.TrimSpace(out), err)
			}
			return nil
		})
	}
	for _, net := range []string{"cluster", "polnet", "opennet"} {
		reach("client", net, true)
	}
	applyYAML(t, c, friendsOnly)
	reach("client", "cluster", false)
	reach("client", "polnet", false)
	reach("client", "opennet", true)
	for _, net := range []string{"cluster", "polnet", "opennet"} {
		reach("friend", net, true)
	}
	if _, err := c.Kubectl(ctx, "-n", policyNS, "delete", "networkpolicy", "friends-only"); err != nil {
		t.Fatal(err)
	}
	for _, net := range []string{"cluster", "polnet", "opennet"} {
		reach("client", net, true)
	}
	if _, err := c.Kubectl(ctx, "delete", "namespace", policyNS, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "polnet", "opennet", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
}
