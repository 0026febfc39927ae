package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/kurma-project/kurma/images/builder"
	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/cniwrap"
	"github.com/kurma-project/kurma/pkg/k8snode"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// shippedManifests are deploy/kubernetes's manifests, each applied as it is.
var shippedManifests = []string{"deploy/kubernetes/kurma.yaml", "deploy/kubernetes/flannel/kurma-flannel.yaml"}

// testNode is a dual-stack Node as kurma-node reads it.
func testNode() *k8snode.NodeObject {
	n := &k8snode.NodeObject{}
	n.Metadata.Name = "ktnode"
	n.Spec.PodCIDR = "10.244.1.0/24"
	n.Spec.PodCIDRs = []string{"10.244.1.0/24", "fd00:10:244:1::/64"}
	n.Status.Addresses = []k8snode.NodeAddress{{Type: "InternalIP", Address: "10.99.0.11"}}
	return n
}

// renderShipped is kurmad's config as kurma-node first writes it on node
// from a manifest: its kurmad.json with the Network objects of its
// networks.yaml (the cluster network among them), with the DaemonSet's
// --cluster-cidrs, the node's interface being iface.
func renderShipped(t *testing.T, m *testutil.Manifest, node *k8snode.NodeObject, iface string) []byte {
	t.Helper()
	var cidrs []string
	if v := testutil.Flag(m.Command(t, "kurmad", "kurmad"), "cluster-cidrs"); v != "" {
		cidrs = strings.Split(v, ",")
	}
	data := m.ConfigMapData(t, "kurmad-config")
	out, err := k8snode.ShippedConfig([]byte(data["kurmad.json"]), []byte(data["networks.yaml"]), k8snode.Input{
		Node: node, ClusterCIDRs: cidrs, InterfaceOf: func(netip.Addr) (string, error) { return iface, nil },
	}, "/")
	if err != nil {
		t.Fatalf("%s: kurmad's config: %v", m.Path, err)
	}
	return out
}

// TestShippedManifests: each manifest's kurmad.json, rendered as
// kurma-node renders it, is a config kurmad takes, whose networks' images
// are in kurma's image and whose plugin configs the wrapper takes; its
// conflist loads; and the flannel variant runs podnet from the flannel
// image with the cluster's credentials, flanneld's config from the
// DaemonSet's cluster CIDR, and the RBAC flanneld needs.
func TestShippedManifests(t *testing.T) {
	for _, path := range shippedManifests {
		m := testutil.ReadManifest(t, filepath.Join(testutil.RepoRoot(), path))
		cfg, err := netconfig.Parse(renderShipped(t, m, testNode(), "eth0"), "/")
		if err != nil {
			t.Fatalf("%s: kurmad.json: %v", path, err)
		}
		for _, n := range cfg.Networks {
			img := strings.TrimPrefix(n.ImageURI, "file://")
			if n.IsPolicy() {
				// The netpol image, built apart (issue 35), which kurma's
				// image carries beside the others.
				if img != filepath.Join(builder.KurmaImages, "netpol.aci") {
					t.Errorf("%s: the policy network %s runs %s, want kurma's netpol image", path, n.Name, n.ImageURI)
				}
				continue
			}
			if filepath.Dir(img) != builder.KurmaImages || (filepath.Base(img) != builder.ACIFile && filepath.Base(img) != builder.FlannelACIFile) {
				t.Errorf("%s: network %s runs %s, which kurma's image does not carry", path, n.Name, n.ImageURI)
			}
			conf, err := n.PluginConfig(nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cniwrap.ParseConfig(conf); err != nil {
				t.Errorf("%s: network %s: the wrapper refuses its config: %v", path, n.Name, err)
			}
		}
		if _, err := libcni.ConfListFromBytes([]byte(m.ConfigMapData(t, "kurmad-config")["00-kurma.conflist"])); err != nil {
			t.Errorf("%s: 00-kurma.conflist: %v", path, err)
		}
		// Signatures of registry images: the ConfigMap's registries.yaml,
		// in its mount, reads sigstore attachments; kurma-node watches the
		// Secrets and ConfigMaps a Network names.
		if cfg.RegistriesDir != "/etc/kurma/config" || !strings.Contains(m.ConfigMapData(t, "kurmad-config")["registries.yaml"], "use-sigstore-attachments: true") {
			t.Errorf("%s: registries_d %q and registries.yaml %q: want the ConfigMap's mount, reading sigstore attachments",
				path, cfg.RegistriesDir, m.ConfigMapData(t, "kurmad-config")["registries.yaml"])
		}
		rrules := m.Rules(t, "Role", "kurma-node")
		for _, want := range []string{"secrets:list", "secrets:watch", "configmaps:list", "configmaps:watch"} {
			if !rrules[want] {
				t.Errorf("%s: Role kurma-node lacks %s (kurma-node watches the Networks' Secrets and ConfigMaps)", path, want)
			}
		}
		checkPolicyNetwork(t, m, cfg)
		checkOwnCredentials(t, m, cfg)
		if !strings.Contains(path, "flannel") {
			continue
		}
		podnet, ok := cfg.Network("podnet")
		if !ok {
			t.Fatalf("%s: no network podnet", path)
		}
		if !podnet.KubernetesCredentials || filepath.Base(podnet.ImageURI) != builder.FlannelACIFile {
			t.Fatalf("%s: podnet on %s, kubernetes_credentials %v: want it on the flannel image, with the credentials", path, podnet.ImageURI, podnet.KubernetesCredentials)
		}
		for _, n := range cfg.Networks {
			if n.Name != "podnet" && !n.IsPolicy() && n.KubernetesCredentials {
				t.Errorf("%s: network %s has cluster credentials too", path, n.Name)
			}
		}
		conf, _ := podnet.PluginConfig(nil)
		fc, err := cniwrap.ParseFlannelConfig(conf)
		if err != nil || fc == nil {
			t.Fatalf("%s: podnet's flannel object: %v", path, err)
		}
		if fc.BackendType() != "vxlan" || fmt.Sprint(fc.Networks) != "[10.244.0.0/16 fd00:10:244::/56]" || !fc.IPMasq ||
			strings.Join(fc.Iface, ",") != "eth0" {
			t.Errorf("%s: flanneld runs with %+v, want vxlan on 10.244.0.0/16 and fd00:10:244::/56 (a dual-stack node), --ip-masq, the node's interface", path, fc)
		}
		// The same manifest on a single-stack node: its family only.
		single := testNode()
		single.Spec.PodCIDRs = single.Spec.PodCIDRs[:1]
		scfg, err := netconfig.Parse(renderShipped(t, m, single, "eth0"), "/")
		if err != nil {
			t.Fatalf("%s: kurmad.json on a single-stack node: %v", path, err)
		}
		spodnet, _ := scfg.Network("podnet")
		sconf, _ := spodnet.PluginConfig(nil)
		if sfc, err := cniwrap.ParseFlannelConfig(sconf); err != nil || sfc == nil || fmt.Sprint(sfc.Networks) != "[10.244.0.0/16]" {
			t.Errorf("%s: on a single-stack node flanneld runs with %+v (%v), want 10.244.0.0/16 only", path, sfc, err)
		}
		// flanneld's access is its ServiceAccount's, exactly what its kube
		// subnet manager needs; kurmad's has none of what only it needed.
		if got := m.Rules(t, "ClusterRole", "kurma-net-podnet"); !sameRules(got, "nodes:get", "nodes:list", "nodes:watch", "nodes/status:patch") {
			t.Errorf("%s: ClusterRole kurma-net-podnet grants %v, want nodes get/list/watch and nodes/status patch, nothing more", path, keys(got))
		}
		rules := m.Rules(t, "ClusterRole", "kurma-node")
		for _, gone := range []string{"nodes:patch", "nodes/status:patch"} {
			if rules[gone] {
				t.Errorf("%s: ClusterRole kurma-node grants %s, which only flanneld needed", path, gone)
			}
		}
	}
}

// checkPolicyNetwork: the manifest's netpol is the policy network, over
// the cluster network, which opts in; the runtime's conflist does not
// name it.
func checkPolicyNetwork(t *testing.T, m *testutil.Manifest, cfg *netconfig.Config) {
	t.Helper()
	netpol, ok := cfg.Network("netpol")
	if !ok || !netpol.IsPolicy() || !netpol.KubernetesCredentials || strings.Join(netpol.PolicyNetworks, ",") != "podnet" {
		t.Fatalf("%s: netpol %+v, want the policy network over podnet, with credentials", m.Path, netpol)
	}
	conf, _ := netpol.PluginConfig(nil)
	if !strings.Contains(string(conf), `"cluster_network":"podnet"`) || !strings.Contains(string(conf), `"policy_networks":["podnet"]`) {
		t.Errorf("%s: netpol's daemon gets %s", m.Path, conf)
	}
	if strings.Contains(m.ConfigMapData(t, "kurmad-config")["00-kurma.conflist"], "netpol") {
		t.Errorf("%s: the conflist names the policy network", m.Path)
	}
	if got := m.Rules(t, "ClusterRole", "kurma-net-netpol"); !sameRules(got, "pods:get", "pods:list", "pods:watch", "namespaces:get", "namespaces:list",
		"namespaces:watch", "nodes:get", "nodes:list", "nodes:watch", "networking.k8s.io/networkpolicies:get", "networking.k8s.io/networkpolicies:list",
		"networking.k8s.io/networkpolicies:watch", "policy.networking.k8s.io/adminnetworkpolicies:get", "policy.networking.k8s.io/adminnetworkpolicies:list",
		"policy.networking.k8s.io/adminnetworkpolicies:watch", "policy.networking.k8s.io/baselineadminnetworkpolicies:get",
		"policy.networking.k8s.io/baselineadminnetworkpolicies:list", "policy.networking.k8s.io/baselineadminnetworkpolicies:watch",
		"events:create", "events.k8s.io/events:create") {
		t.Errorf("%s: ClusterRole kurma-net-netpol grants %v", m.Path, keys(got))
	}
}

// checkOwnCredentials: every network with kubernetes_credentials has its
// ServiceAccount kurma-net-<name> (no pod mounts it), bound to a
// ClusterRole of its own, and kurma-node may create its tokens, by name,
// and no others.
func checkOwnCredentials(t *testing.T, m *testutil.Manifest, cfg *netconfig.Config) {
	t.Helper()
	var want []string
	for _, n := range cfg.Networks {
		if !n.KubernetesCredentials {
			continue
		}
		sa := "kurma-net-" + n.Name
		want = append(want, sa)
		if o := m.Object(t, "ServiceAccount", sa); o["automountServiceAccountToken"] != false {
			t.Errorf("%s: ServiceAccount %s mounts its token in pods: %v", m.Path, sa, o)
		}
		b := m.Object(t, "ClusterRoleBinding", sa)
		subj, _ := b["subjects"].([]any)
		role, _ := b["roleRef"].(map[string]any)
		if len(subj) != 1 || subj[0].(map[string]any)["name"] != sa || role["name"] != sa {
			t.Errorf("%s: ClusterRoleBinding %s: %v", m.Path, sa, b)
		}
	}
	var names []string
	rules, _ := m.Object(t, "Role", "kurma-node")["rules"].([]any)
	for _, r := range rules {
		rm := r.(map[string]any)
		if fmt.Sprint(rm["resources"]) != "[serviceaccounts/token]" {
			continue
		}
		if fmt.Sprint(rm["verbs"]) != "[create]" {
			t.Errorf("%s: kurma-node's serviceaccounts/token rule: %v", m.Path, rm)
		}
		rn, _ := rm["resourceNames"].([]any)
		for _, n := range rn {
			names = append(names, n.(string))
		}
	}
	sort.Strings(names)
	sort.Strings(want)
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("%s: kurma-node may create tokens of %v, want exactly %v", m.Path, names, want)
	}
	if m.Rules(t, "ClusterRole", "kurma-node")["serviceaccounts/token:create"] {
		t.Errorf("%s: ClusterRole kurma-node creates tokens of ServiceAccounts in every namespace", m.Path)
	}
}

// sameRules: got grants exactly want.
func sameRules(got map[string]bool, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
