package e2e

// Networks chosen per pod (issue 18): the pod annotation kurma.dev/networks,
// which containerd's CRI and CRI-O hand kurma-cni as the capability
// argument io.kubernetes.cri.pod-annotations, through libcni (what both
// link) against a real kurmad with two networks: rtnet (kt-rt0,
// 10.217.0.0/16) and rtnet2 (kt-rt1, 10.218.0.0/16).

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/kurmacni"
)

const (
	rt2Network = "rtnet2"
	rt2Bridge  = "kt-rt1"
	rt2Subnet  = "10.218.0.0/16"
)

// newTwoNetworkEnv is newRuntimeEnv's kurmad with rtnet2 beside rtnet.
func newTwoNetworkEnv(t *testing.T) *rtEnv {
	t.Helper()
	e := newEnv(t)
	dir := testutil.Build(t, testutil.BuildOptions{}, "./cmd/kurma-cni")
	t.Cleanup(func() { testutil.DeleteBridges([]string{rtBridge, rt2Bridge}, rtLinkPrefix) })
	bridge := func(name, br, subnet string) netDef {
		return netDef{Name: name, Conf: map[string]any{"cniVersion": "1.0.0", "type": "bridge", "bridge": br, "isGateway": true,
			"ipam": map[string]any{"type": "host-local", "subnet": subnet}}}
	}
	e.writeConfig([]netDef{bridge(rtNetwork, rtBridge, rtSubnet), bridge(rt2Network, rt2Bridge, rt2Subnet)}, nil)
	e.start()
	return &rtEnv{env: e, cniBin: dir}
}

// annotatedConflist is a Kubernetes node's conflist: kurma-cni for rtnet,
// declaring the pod-annotations capability.
func (r *rtEnv) annotatedConflist(t *testing.T) *libcni.NetworkConfigList {
	t.Helper()
	entry := map[string]any{"type": "kurma-cni", "network": rtNetwork, "socket": r.Socket,
		"capabilities": map[string]bool{kurmacni.PodAnnotationsCapability: true, "portMappings": true}}
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "cniVersions": []string{"1.0.0", "1.1.0"}, "name": "ktrtannot",
		"plugins": []map[string]any{entry}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// podAnnotations is the capability argument a runtime passes for a pod
// with these annotations.
func podAnnotations(kv ...string) map[string]any {
	m := map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return map[string]any{kurmacni.PodAnnotationsCapability: m}
}

// TestKurmaCNIPodAnnotation: a pod annotated kurma.dev/networks:
// "rtnet2,rtnet" keeps the conflist's rtnet as its cluster network, through
// libcni: eth0 (the runtime's CNI_IFNAME) in rtnet's subnet, then net1 in
// rtnet2's, both in the result; kurmad's pod lists them in that order; DEL
// leaves nothing. kurma.dev/cluster-network: "rtnet2" makes rtnet2 the
// pod's eth0 instead. A pod without the annotation gets the conflist's
// rtnet only.
func TestKurmaCNIPodAnnotation(t *testing.T) {
	r := newTwoNetworkEnv(t)
	ctx := context.Background()
	cni := r.libcni(t)
	list := r.annotatedConflist(t)
	_, sub1, _ := net.ParseCIDR(rtSubnet)
	_, sub2, _ := net.ParseCIDR(rt2Subnet)

	ns := runtimeNetns(t, "annot")
	rt := &libcni.RuntimeConf{ContainerID: "annot", NetNS: ns, IfName: "eth0",
		CapabilityArgs: podAnnotations(kurmacni.NetworksAnnotation, "rtnet2,rtnet")}
	res, err := cni.AddNetworkList(ctx, list, rt)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.IPs) != 2 || !sub1.Contains(cur.IPs[0].Address.IP) || !sub2.Contains(cur.IPs[1].Address.IP) {
		t.Fatalf("result IPs %v, want one in %s then one in %s", cur.IPs, rtSubnet, rt2Subnet)
	}
	if eth0 := testutil.IPv4In(t, ns, "eth0"); !testutil.HasIP(eth0, cur.IPs[0].Address.IP) {
		t.Errorf("eth0 has %v, want rtnet's %s", eth0, cur.IPs[0].Address.IP)
	}
	second := cur.Interfaces[*cur.IPs[1].Interface].Name
	if second != "net1" || !testutil.HasIP(testutil.IPv4In(t, ns, second), cur.IPs[1].Address.IP) {
		t.Errorf("rtnet2's interface %s (want net1) lacks %s", second, cur.IPs[1].Address.IP)
	}
	pods, err := r.Client.FindPods(ctx, api.RuntimeRef{ContainerID: "annot"})
	if err != nil || len(pods) != 1 {
		t.Fatalf("kurmad's pods of annot: %+v (%v)", pods, err)
	}
	var names []string
	for _, a := range pods[0].Attachments {
		names = append(names, a.Network)
	}
	if !slices.Equal(names, []string{rtNetwork, rt2Network}) {
		t.Errorf("the pod's networks %v, want rtnet, rtnet2", names)
	}
	if err := cni.DelNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	r.checkNoTwoNetworkPods(t)
	checkRuntimeNetns(t, ns)

	replaced := &libcni.RuntimeConf{ContainerID: "annotcl", NetNS: runtimeNetns(t, "annotcl"), IfName: "eth0",
		CapabilityArgs: podAnnotations(kurmacni.ClusterNetworkAnnotation, rt2Network)}
	res, err = cni.AddNetworkList(ctx, list, replaced)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err = current.NewResultFromResult(res); err != nil || len(cur.IPs) != 1 || !sub2.Contains(cur.IPs[0].Address.IP) ||
		!testutil.HasIP(testutil.IPv4In(t, replaced.NetNS, "eth0"), cur.IPs[0].Address.IP) {
		t.Errorf("with the cluster network replaced: result %+v (%v), want eth0 alone, in %s", cur, err, rt2Subnet)
	}
	if err := cni.DelNetworkList(ctx, list, replaced); err != nil {
		t.Fatal(err)
	}
	r.checkNoTwoNetworkPods(t)

	plain := &libcni.RuntimeConf{ContainerID: "plain", NetNS: runtimeNetns(t, "plain"), IfName: "eth0",
		CapabilityArgs: podAnnotations("app", "web")}
	res, err = cni.AddNetworkList(ctx, list, plain)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err = current.NewResultFromResult(res); err != nil || len(cur.IPs) != 1 || !sub1.Contains(cur.IPs[0].Address.IP) {
		t.Errorf("without the annotation: result %+v (%v), want one address in %s", cur, err, rtSubnet)
	}
	if err := cni.DelNetworkList(ctx, list, plain); err != nil {
		t.Fatal(err)
	}
	r.checkNoTwoNetworkPods(t)
}

// TestKurmaCNIPodAnnotationUnknown: an annotation naming a network kurmad
// does not have fails the ADD with CNI code 7 naming it, and attaches
// nothing, not even the networks before it: kurmad holds no pod, the
// runtime's namespace is as it was, no veth is on either bridge.
func TestKurmaCNIPodAnnotationUnknown(t *testing.T) {
	r := newTwoNetworkEnv(t)
	ctx := context.Background()
	cni := r.libcni(t)
	list := r.annotatedConflist(t)
	ns := runtimeNetns(t, "annotbad")
	rt := &libcni.RuntimeConf{ContainerID: "annotbad", NetNS: ns, IfName: "eth0",
		CapabilityArgs: podAnnotations(kurmacni.NetworksAnnotation, "rtnet2,rtnet,nosuchnet")}
	_, err := cni.AddNetworkList(ctx, list, rt)
	if code, msg := cniCode(err); code != types.ErrInvalidNetworkConfig || !strings.Contains(msg, `"nosuchnet"`) {
		t.Fatalf("ADD naming an unknown network: %v (code %d), want code 7 naming nosuchnet", err, code)
	}
	r.checkNoTwoNetworkPods(t)
	checkRuntimeNetns(t, ns)
	// A runtime DELs a sandbox whose ADD failed: that succeeds.
	if err := cni.DelNetworkList(ctx, list, rt); err != nil {
		t.Errorf("DEL after the failed ADD: %v", err)
	}
}

// checkNoTwoNetworkPods is checkNoPods over both bridges.
func (r *rtEnv) checkNoTwoNetworkPods(t *testing.T) {
	t.Helper()
	pods, err := r.Client.ListPods(context.Background())
	if err != nil || len(pods) != 0 {
		t.Errorf("kurmad holds %d pods (%v): %+v", len(pods), err, pods)
	}
	for _, o := range r.PodObjects([]string{rtBridge, rt2Bridge}).List() {
		t.Errorf("left behind: %s", o)
	}
}
