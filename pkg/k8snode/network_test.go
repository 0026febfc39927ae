package k8snode

import (
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

func network(name string, spec NetworkSpec) *NetworkObject {
	o := &NetworkObject{Spec: spec}
	o.Metadata.Name = name
	return o
}

const mergeBase = `{"plugin_timeout": "1m", "pod_networks": [
  {"name": "podnet", "image": "docker://registry.example/kurma/net:v1", "default": true, "type": "bridge", "bridge": "kt0"}]}`

// TestMerge: every Network becomes a network of kurmad's config beside
// the template's, which kurmad's own check takes; one that kurmad would
// refuse, or whose name the template holds, is left out with its reason
// and holds back no other.
func TestMerge(t *testing.T) {
	objs := []*NetworkObject{
		network("webnet", NetworkSpec{Image: "docker://registry.example/kurma/net:v2", ContainerInterface: "web{{num}}",
			Config: map[string]json.RawMessage{"type": json.RawMessage(`"bridge"`), "bridge": json.RawMessage(`"kt1"`)}}),
		network("podnet", NetworkSpec{Image: "docker://registry.example/kurma/net:v1"}),
		network("badlimits", NetworkSpec{Image: "docker://registry.example/kurma/net:v1",
			Config: map[string]json.RawMessage{"type": json.RawMessage(`"bridge"`), "limits": json.RawMessage(`{"pids": -1}`)}}),
		network("setsname", NetworkSpec{Image: "docker://registry.example/kurma/net:v1",
			Config: map[string]json.RawMessage{"image": json.RawMessage(`"file:///x"`)}}),
	}
	images := map[string]string{}
	for _, o := range objs {
		images[o.Metadata.Name] = o.Spec.Image
	}
	m, err := Merge([]byte(mergeBase), objs, images, nil, "/")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconfig.Parse(m.Config, "/")
	if err != nil {
		t.Fatalf("kurmad refuses the merged config: %v\n%s", err, m.Config)
	}
	if got := strings.Join(cfg.Names(), ","); got != "podnet,webnet" {
		t.Errorf("networks %s, want podnet,webnet", got)
	}
	if n, _ := cfg.Network("webnet"); n.ImageURI != "docker://registry.example/kurma/net:v2" {
		t.Errorf("webnet's image %q", n.ImageURI)
	}
	want := map[string]string{"podnet": StateConflict, "badlimits": StateInvalid, "setsname": StateInvalid}
	for name, state := range want {
		r, ok := m.Refused[name]
		if !ok || r.State != state || !strings.Contains(r.Reason+name, name) {
			t.Errorf("%s: refused %+v, want state %s", name, r, state)
		}
	}
	if r := m.Refused["setsname"]; !strings.Contains(r.Reason, "spec.config.image: set by spec.image") {
		t.Errorf("setsname's reason %q, want it to name spec.config.image", r.Reason)
	}
	if r := m.Refused["podnet"]; !strings.Contains(r.Reason, "defined twice") {
		t.Errorf("podnet's reason %q", r.Reason)
	}
	if len(m.Refused) != 3 {
		t.Errorf("refused %v", m.Refused)
	}
}

// TestAdmits: no selector, or a default network, admits every namespace;
// a selector admits the namespaces whose labels match and names itself
// when it refuses one.
func TestAdmits(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	tests := []struct {
		spec   NetworkSpec
		labels map[string]string
		ok     bool
	}{
		{NetworkSpec{}, nil, true},
		{NetworkSpec{NamespaceSelector: sel}, map[string]string{"team": "a", "x": "y"}, true},
		{NetworkSpec{NamespaceSelector: sel}, map[string]string{"team": "b"}, false},
		{NetworkSpec{NamespaceSelector: sel, Default: true}, nil, true},
	}
	for i, tt := range tests {
		ok, rule, err := network("n", tt.spec).Admits(tt.labels)
		if err != nil || ok != tt.ok {
			t.Errorf("%d: admits %v (%v), want %v", i, ok, err, tt.ok)
		}
		if !ok && rule != "spec.namespaceSelector team=a" {
			t.Errorf("%d: rule %q", i, rule)
		}
	}
}

// TestMergeAuths: pull secrets merge into one auth file; a second Secret
// with other credentials for a registry gets them scoped to the
// repositories its Networks pull there (both Networks work); only two
// Secrets for one repository conflict, and the later is refused naming
// both.
func TestMergeAuths(t *testing.T) {
	a := []byte(`{"auths": {"reg.example:5000": {"auth": "dTpw"}}}`)
	b := []byte(`{"auths": {"other.example": {"auth": "dTpx"}}}`)
	out, refused := MergeAuths(map[string][]byte{"a": a, "b": b}, nil)
	if len(refused) != 0 || string(out) != `{"auths":{"other.example":{"auth":"dTpx"},"reg.example:5000":{"auth":"dTpw"}}}` {
		t.Errorf("merged %s (%v)", out, refused)
	}
	c := []byte(`{"auths": {"reg.example:5000": {"auth": "eDp5"}}}`)
	repos := map[string][]string{"a": {"reg.example:5000/team-a/net"}, "c": {"reg.example:5000/team-c/net"}}
	out, refused = MergeAuths(map[string][]byte{"a": a, "c": c}, repos)
	if len(refused) != 0 || string(out) != `{"auths":{"reg.example:5000":{"auth":"dTpw"},"reg.example:5000/team-c/net":{"auth":"eDp5"}}}` {
		t.Errorf("two Secrets for one registry: %s, %v; want a's for the registry, c's for its repository", out, refused)
	}
	for _, tt := range []struct {
		what  string
		repos map[string][]string
	}{
		{"both Secrets for one repository", map[string][]string{"a": {"reg.example:5000/net"}, "c": {"reg.example:5000/net"}}},
		{"the later Secret's Network's repository unknown", map[string][]string{"a": {"reg.example:5000/net"}}},
	} {
		out, refused = MergeAuths(map[string][]byte{"a": a, "c": c}, tt.repos)
		if tt.repos["c"] == nil {
			// c pulls nothing from the registry: its credentials there
			// are not needed, and nothing is refused.
			if len(refused) != 0 || string(out) != `{"auths":{"reg.example:5000":{"auth":"dTpw"}}}` {
				t.Errorf("%s: %s, %v", tt.what, out, refused)
			}
			continue
		}
		if err := refused["c"]; err == nil || !strings.Contains(err.Error(), "Secrets a and c") || string(out) != `{"auths":{"reg.example:5000":{"auth":"dTpw"}}}` {
			t.Errorf("%s: %s, %v; want a's credentials and c refused naming both", tt.what, out, refused)
		}
	}
	if r := RepositoryOf("docker://nginx:1.27"); r != "docker.io/library/nginx" {
		t.Errorf("RepositoryOf(docker://nginx:1.27) = %q", r)
	}
}

// TestManifestsShareTheCRD: the flannel manifest installs the very CRD
// the single-node one does.
func TestManifestsShareTheCRD(t *testing.T) {
	crd := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			if strings.Contains(doc, "kind: CustomResourceDefinition") {
				return doc
			}
		}
		t.Fatalf("%s has no CustomResourceDefinition", path)
		return ""
	}
	if crd("../../deploy/kubernetes/kurma.yaml") != crd("../../deploy/kubernetes/flannel/kurma-flannel.yaml") {
		t.Error("the two manifests' Network CRDs differ")
	}
}

// TestPrune: the entries of deleted nodes leave the status with the
// counts recomputed from those left; nothing deleted, nothing to write;
// the node whose entry changed last among those left is the one to write.
func TestPrune(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Unix(1_700_000_000+int64(s), 0)) }
	two, one := 2, 1
	st := NetworkStatus{Running: &two, Failing: &one, Nodes: []NodeStatus{
		{Node: "a", State: api.StateRunning, LastTransitionTime: at(1)},
		{Node: "b", State: api.StateRunning, LastTransitionTime: at(3)},
		{Node: "c", State: api.StateFailed, Reason: "pull", LastTransitionTime: at(2)},
	}}
	if _, gone := Prune(st, func(string) bool { return false }); gone != nil {
		t.Errorf("no node deleted: pruned %v", gone)
	}
	if w := LastWriter(st.Nodes); w != "b" {
		t.Errorf("last writer of all three: %q, want b", w)
	}
	left, gone := Prune(st, func(n string) bool { return n == "b" || n == "c" })
	if !slices.Equal(gone, []string{"b", "c"}) || len(left.Nodes) != 1 || left.Nodes[0].Node != "a" {
		t.Fatalf("b and c deleted: left %+v, gone %v", left.Nodes, gone)
	}
	if *left.Running != 1 || *left.Failing != 0 {
		t.Errorf("counts after pruning: running %d failing %d, want 1 and 0", *left.Running, *left.Failing)
	}
	if w := LastWriter(left.Nodes); w != "a" {
		t.Errorf("last writer once b and c are gone: %q, want a", w)
	}
	if *st.Running != 2 || len(st.Nodes) != 3 {
		t.Errorf("Prune changed its input: %+v", st)
	}
	if w := LastWriter(nil); w != "" {
		t.Errorf("last writer of no entries: %q", w)
	}
}

// TestMergeNetworkPolicy: a Network's spec.networkPolicy opts its network
// in to the template's policy network, which then polices it; without a
// policy network kurmad's check refuses the Network, saying why; the key
// is the spec's, not spec.config's.
func TestMergeNetworkPolicy(t *testing.T) {
	const withPolicy = `{"pod_networks": [
  {"name": "podnet", "image": "file:///x.aci", "default": true, "type": "bridge", "network_policy": true},
  {"name": "netpol", "image": "file:///n.aci", "role": "policy", "kubernetes_credentials": true}]}`
	objs := []*NetworkObject{
		network("web", NetworkSpec{Image: "file:///x.aci", NetworkPolicy: true, Config: map[string]json.RawMessage{"type": json.RawMessage(`"bridge"`)}}),
		network("inconfig", NetworkSpec{Image: "file:///x.aci", Config: map[string]json.RawMessage{"network_policy": json.RawMessage(`true`)}}),
	}
	images := map[string]string{"web": "file:///x.aci", "inconfig": "file:///x.aci"}
	m, err := Merge([]byte(withPolicy), objs, images, nil, "/")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconfig.Parse(m.Config, "/")
	if err != nil {
		t.Fatalf("kurmad refuses the merged config: %v\n%s", err, m.Config)
	}
	netpol, _ := cfg.Network("netpol")
	if !slices.Equal(netpol.PolicyNetworks, []string{"podnet", "web"}) {
		t.Errorf("netpol polices %v, want podnet and web", netpol.PolicyNetworks)
	}
	if r := m.Refused["inconfig"]; r.State != StateInvalid || !strings.Contains(r.Reason, "set by spec.networkPolicy") {
		t.Errorf("network_policy in spec.config: %+v", r)
	}
	m, err = Merge([]byte(mergeBase), objs[:1], images, nil, "/")
	if err != nil {
		t.Fatal(err)
	}
	if r := m.Refused["web"]; r.State != StateInvalid || !strings.Contains(r.Reason, `needs a network of role "policy"`) {
		t.Errorf("spec.networkPolicy without a policy network: %+v", r)
	}
}

// TestInstallNetworks: the manifests' networks.yaml holds Network objects
// kurma-node reads (the cluster network marked, taking every pod), each
// of which kurmad's check takes beside the ConfigMap's template; a
// document of another kind is refused, naming it.
func TestInstallNetworks(t *testing.T) {
	for _, manifest := range []string{"../../deploy/kubernetes/kurma.yaml", "../../deploy/kubernetes/flannel/kurma-flannel.yaml"} {
		data := testutil.ReadManifest(t, manifest).ConfigMapData(t, "kurmad-config")
		tmpl, nets := data["kurmad.json"], data["networks.yaml"]
		objs, err := ReadNetworks(strings.NewReader(nets))
		if err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
		var cluster []string
		for _, u := range objs {
			o, err := NetworkObjectOf(u)
			if err != nil {
				t.Fatal(err)
			}
			if o.Spec.ClusterNetwork {
				cluster = append(cluster, o.Metadata.Name)
			}
		}
		if !slices.Equal(cluster, []string{"podnet"}) {
			t.Errorf("%s: cluster networks %v, want podnet", manifest, cluster)
		}
		node := &NodeObject{}
		node.Metadata.Name = "n1"
		node.Spec.PodCIDR, node.Spec.PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24"}
		node.Status.Addresses = []NodeAddress{{"InternalIP", "10.99.0.1"}}
		in := Input{Node: node, ClusterCIDRs: []string{"10.244.0.0/16"}, InterfaceOf: func(netip.Addr) (string, error) { return "eth0", nil }}
		cfg, err := ShippedConfig([]byte(tmpl), []byte(nets), in, "/")
		if err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
		if !strings.Contains(string(cfg), `"network_policy": true`) || !strings.Contains(string(cfg), `"name": "podnet"`) {
			t.Errorf("%s: merged config without podnet opted in to policy:\n%s", manifest, cfg)
		}
	}
	if _, err := ReadNetworks(strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")); err == nil || !strings.Contains(err.Error(), `ConfigMap "x" is not a named Network`) {
		t.Errorf("a ConfigMap in networks.yaml: %v", err)
	}
}

// TestNames: a NAD's network and a node's finalizer stay within their
// length limits and stay distinct for long names.
func TestNames(t *testing.T) {
	if n := NADNetwork("team-a", "macvlan"); n != "nad.team-a.macvlan" {
		t.Errorf("NADNetwork = %q", n)
	}
	long := strings.Repeat("x", 70)
	a, b := NADNetwork("team-a", long+"a"), NADNetwork("team-a", long+"b")
	if a == b || len(a) > netconfig.MaxNameLen || !strings.HasPrefix(a, "nad.team-a.") {
		t.Errorf("NADNetwork of long names: %q, %q", a, b)
	}
	if f := NodeFinalizer("kt-node-1"); f != "node.kurma.dev/kt-node-1" {
		t.Errorf("NodeFinalizer = %q", f)
	}
	node := strings.Repeat("n.", 40)
	if f := NodeFinalizer(node); len(f)-len(FinalizerPrefix) > 63 || strings.HasSuffix(f, ".") || f == NodeFinalizer(node+"x") {
		t.Errorf("NodeFinalizer of a long name: %q", f)
	}
}
