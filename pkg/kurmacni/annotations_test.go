package kurmacni

import (
	"bytes"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// annotated is a conflist entry for mynet that declares the pod-annotations
// capability, as the runtime calls it for a pod with these annotations.
func annotated(sock string, annotations map[string]string) []byte {
	rc := map[string]any{PodAnnotationsCapability: annotations,
		"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}}
	return conf("1.0.0", sock, "mynet", map[string]any{"runtimeConfig": rc,
		"capabilities": map[string]bool{PodAnnotationsCapability: true, "portMappings": true}})
}

// TestAddAnnotatedNetworks: the conflist's network is always the pod's
// first (CNI_IFNAME); a pod's kurma.dev/networks annotation adds networks
// after it, in its order, as net1, net2, ... or the interface it names
// (by name@interface or multus' JSON form, whose ips, mac and cni-args
// reach that network alone); kurma.dev/cluster-network replaces the
// first; the pod annotations themselves go to no network, the other
// capability arguments go to each.
func TestAddAnnotatedNetworks(t *testing.T) {
	sock, b := serve(t)
	tests := []struct {
		name        string
		annotations map[string]string
		want        []string
		interfaces  map[string]string
		rc          map[string]string // network → its "ips" capability argument
		refs        []string
	}{
		{"the cluster network named too stays first", map[string]string{NetworksAnnotation: "other,mynet", "app": "web"}, []string{"mynet", "other"}, map[string]string{"other": "net1"}, nil, nil},
		{"blanks around names", map[string]string{NetworksAnnotation: " other , mynet "}, []string{"mynet", "other"}, map[string]string{"other": "net1"}, nil, nil},
		{"one network, its interface named", map[string]string{NetworksAnnotation: "other@data0"}, []string{"mynet", "other"}, map[string]string{"other": "data0"}, nil, nil},
		{"multus' JSON form", map[string]string{NetworksAnnotation: `[{"name": "other", "interface": "net1", "ips": ["10.1.2.3/24"], "mac": "c2:00:00:00:00:01", "cni-args": {"K": "v"}}]`},
			[]string{"mynet", "other"}, map[string]string{"other": "net1"}, map[string]string{"other": `["10.1.2.3/24"]`}, []string{"mynet", "other:K=v"}},
		{"the cluster network replaced", map[string]string{ClusterNetworkAnnotation: "other", NetworksAnnotation: "mynet"}, []string{"other", "mynet"}, map[string]string{"mynet": "net1"}, nil, nil},
		{"no annotation: the config's networks", map[string]string{"app": "web"}, []string{"mynet"}, nil, nil, nil},
		{"Multus' annotation, no node agent: names are kurma networks", map[string]string{MultusNetworksAnnotation: "other@data0"}, []string{"mynet", "other"}, map[string]string{"other": "data0"}, nil, nil},
		{"both annotations, interfaces numbered across them", map[string]string{NetworksAnnotation: "other", MultusNetworksAnnotation: `[{"name": "third", "ips": ["10.1.2.3/24"]}]`},
			[]string{"mynet", "other", "third"}, map[string]string{"other": "net1", "third": "net2"}, map[string]string{"third": `["10.1.2.3/24"]`}, nil},
		{"Multus' default network replaces the cluster network", map[string]string{MultusDefaultNetworkAnnotation: "other", MultusNetworksAnnotation: "mynet"}, []string{"other", "mynet"}, map[string]string{"mynet": "net1"}, nil, nil},
		{"no annotations at all", nil, []string{"mynet"}, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			a := cmdArgs(annotated(sock, tt.annotations), "annot", "eth0")
			a.Args = ""
			if err := newPlugin(&out).Add(a); err != nil {
				t.Fatal(err)
			}
			req := b.Created()[len(b.Created())-1]
			refs := tt.refs
			if refs == nil {
				refs = tt.want
			}
			if !slices.Equal(req.Networks, refs) {
				t.Errorf("networks %q, want %q", req.Networks, refs)
			}
			if !maps.Equal(req.Interfaces, tt.interfaces) {
				t.Errorf("interfaces %v, want %v", req.Interfaces, tt.interfaces)
			}
			for n, ips := range tt.rc {
				if got := string(req.RuntimeConfig[n]["ips"]); got != ips {
					t.Errorf("network %s: ips %s, want %s", n, got, ips)
				}
			}
			for _, n := range tt.want {
				rc := req.RuntimeConfig[n]
				if _, ok := rc[PodAnnotationsCapability]; ok {
					t.Errorf("network %s got the pod's annotations: %s", n, rc[PodAnnotationsCapability])
				}
				if len(rc["portMappings"]) == 0 {
					t.Errorf("network %s lacks the portMappings capability argument: %v", n, rc)
				}
			}
			res := parse(t, out.Bytes(), "1.0.0")
			if len(res.Interfaces) != len(tt.want) || res.Interfaces[0].Name != "eth0" {
				t.Errorf("result interfaces %+v, the first named eth0", res.Interfaces)
			}
			if err := newPlugin(io.Discard).Del(a); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAddAnnotationErrors: an annotation naming a network kurmad lacks
// fails the ADD naming it (code 7) and creates no pod; a malformed one
// fails before kurmad is asked, naming the annotation.
func TestAddAnnotationErrors(t *testing.T) {
	sock, b := serve(t)
	tests := []struct {
		name, value string
		msg         string
	}{
		{"unknown network", "mynet,nope", `unknown network "nope"`},
		{"empty", " ", NetworksAnnotation + `=" ": names no network`},
		{"empty entry", "mynet,,other", "entry 1 is empty"},
		{"a bad name", "mynet,no/pe", `element 1 ("no/pe"): not a kurma network's name`},
		{"twice", "mynet,other,mynet", `element 2 ("mynet"): the network is listed twice`},
		{"not JSON", `[{"name": "other"`, "not a JSON list of network selections"},
		{"an unknown key", `[{"name": "other", "ifname": "x"}]`, `unknown field "ifname"`},
		{"a namespace", `[{"name": "other", "namespace": "team-a"}]`, `element 0 ("other"): "namespace" "team-a": kurma networks are cluster-wide`},
		{"a bad IP", `[{"name": "other", "ips": ["10.1.2.300"]}]`, `element 0 ("other"): ips: "10.1.2.300"`},
		{"a bad MAC", `[{"name": "other", "mac": "c2:00"}]`, `element 0 ("other"): mac "c2:00"`},
		{"a broadcast MAC", `[{"name": "other", "mac": "ff:ff:ff:ff:ff:ff"}]`, `element 0 ("other"): mac "ff:ff:ff:ff:ff:ff" is a multicast or broadcast address`},
		{"a default route", `[{"name": "other", "default-route": ["10.1.2.1"]}]`, `element 0 ("other"): "default-route"`},
		{"a bad interface", `[{"name": "other", "interface": "a/b"}]`, `element 0 ("other"): interface "a/b"`},
		{"an interface twice", "other@net1,third@net1", `element 1 ("third"): interface "net1" is asked for twice`},
		{"a number in cni-args", `[{"name": "other", "cni-args": {"K": 1}}]`, `element 0 ("other"): "cni-args" "K"`},
		{"options for the cluster network", "mynet@eth1", `element 0 ("mynet"): it is the pod's cluster network`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(b.Created())
			a := cmdArgs(annotated(sock, map[string]string{NetworksAnnotation: tt.value}), "annoterr", "eth0")
			checkCNIError(t, newPlugin(io.Discard).Add(a), types.ErrInvalidNetworkConfig, tt.msg)
			pods, err := b.ListPods(t.Context())
			if err != nil || len(pods) != 0 {
				t.Errorf("pods after the failed ADD: %+v (%v)", pods, err)
			}
			if tt.name != "unknown network" && len(b.Created()) != before {
				t.Errorf("kurmad was asked to create %+v for a malformed annotation", b.Created()[before:])
			}
		})
	}
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		msg         string
	}{
		{"a namespace without kurma-node", map[string]string{MultusNetworksAnnotation: "team-a/other"}, `"team-a/other" names a NetworkAttachmentDefinition of namespace "team-a", which only kurma-node resolves`},
		{"a bad namespace", map[string]string{MultusNetworksAnnotation: "Team_A/other"}, `element 0 ("other"): "Team_A" is not a namespace's name`},
		{"Multus' unknown key", map[string]string{MultusNetworksAnnotation: `[{"name": "other", "infiniband-guid": "x"}]`}, `unknown field "infiniband-guid"`},
		{"two replacements of the cluster network", map[string]string{ClusterNetworkAnnotation: "other", MultusDefaultNetworkAnnotation: "third"}, "both replace the pod's cluster network"},
		{"a network in both annotations", map[string]string{NetworksAnnotation: "other", MultusNetworksAnnotation: "other"}, `the pod names network "other" twice`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := cmdArgs(annotated(sock, tt.annotations), "annoterr", "eth0")
			checkCNIError(t, newPlugin(io.Discard).Add(a), types.ErrInvalidNetworkConfig, tt.msg)
		})
	}
	bad := conf("1.0.0", sock, "mynet", map[string]any{"runtimeConfig": map[string]any{PodAnnotationsCapability: []string{"x"}}})
	checkCNIError(t, newPlugin(io.Discard).Add(cmdArgs(bad, "annoterr", "eth0")), types.ErrInvalidNetworkConfig, PodAnnotationsCapability)
}

// TestParseNetworksAnnotationMessages: each fault of an annotation's
// value is reported whole, code 7, the first fault of the first bad
// element; an element with several faults names the one checked first
// (name, listed twice, namespace, interface, ips, mac, default route,
// cni-args), so a pod's author fixes them in a stable order.
func TestParseNetworksAnnotationMessages(t *testing.T) {
	const k, m = NetworksAnnotation, MultusNetworksAnnotation
	tests := []struct {
		name, key, value, msg string
	}{
		{"blank", k, "  ", `names no network; list kurma networks separated by commas, e.g. "webnet,mynet", or remove the annotation`},
		{"an empty JSON list", k, `[]`, `names no network`},
		{"not JSON", k, `[{`, `not a JSON list of network selections (name, interface, ips, mac, cni-args): unexpected EOF`},
		{"an empty entry", k, "a, ,b", `entry 1 is empty`},
		{"no name", k, `[{"name": "a"}, {"interface": "x"}]`, `element 1 has no network name`},
		{"no name before a bad entry", k, "a,@x,b/c", `element 1 has no network name`},
		{"a bad name before twice", k, `[{"name": "a"}, {"name": "a/b", "interface": "eth0"}]`, `element 1 ("a/b"): not a kurma network's name: invalid characters found in network name`},
		{"Multus: twice before the interface", m, `[{"name": "a", "namespace": "x"}, {"name": "a", "namespace": "x", "interface": "a/b"}]`, `element 1 ("a"): the network is listed twice`},
		{"a namespace before the interface", k, `[{"name": "a", "namespace": "x", "interface": "a/b"}]`, `element 0 ("a"): "namespace" "x": kurma networks are cluster-wide (kubectl get networks.kurma.dev); drop it, or name a NetworkAttachmentDefinition in ` + m},
		{"Multus: a bad namespace before the interface", m, `[{"name": "a", "namespace": "X", "interface": "a/b"}]`, `element 0 ("a"): "X" is not a namespace's name`},
		{"Multus: same name, other namespaces", m, "x/a@if1,y/a@if1", `element 1 ("a"): interface "if1" is asked for twice`},
		{"a bad interface before the IPs", k, `[{"name": "a", "interface": "a/b", "ips": ["x"]}]`, `element 0 ("a"): interface "a/b": interface name contains / or : or whitespace characters`},
		{"an IP before the MAC", k, `[{"name": "a", "ips": ["10.0.0.1/24", "x"], "mac": "x"}]`, `element 0 ("a"): ips: "x" is neither an IP address nor a CIDR`},
		{"a MAC before the default route", k, `[{"name": "a", "mac": "x", "default-route": ["10.0.0.1"]}]`, `element 0 ("a"): mac "x": address x: invalid MAC address`},
		{"a multicast MAC", k, `[{"name": "a", "mac": "01:00:5e:00:00:01"}]`, `element 0 ("a"): mac "01:00:5e:00:00:01" is a multicast or broadcast address; an interface needs a unicast one, whose first byte is even`},
		{"the default route before cni-args", k, `[{"name": "a", "default-route": ["10.0.0.1"], "cni-args": {"K": 1}}]`, `element 0 ("a"): "default-route": the pod's default route is its cluster network's; kurma does not move it (set ` + ClusterNetworkAnnotation + ` to replace the cluster network)`},
		{"cni-args with a ';'", k, `[{"name": "a", "cni-args": {"K": "v;w"}}]`, `element 0 ("a"): "cni-args" "K": each argument must be a string, with no ';' (and no '=' in its key)`},
		{"cni-args with a '=' in a key", k, `[{"name": "a", "cni-args": {"K=": "v"}}]`, `element 0 ("a"): "cni-args" "K=": each argument must be a string, with no ';' (and no '=' in its key)`},
		{"a bad first element before a bad second", k, `[{"name": "a", "mac": "x"}, {"name": "b/"}]`, `element 0 ("a"): mac "x": address x: invalid MAC address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := parseNetworksAnnotation(tt.key, tt.value)
			if e == nil {
				t.Fatalf("%+v, want an error", got)
			}
			want := "kurma-cni: pod annotation " + tt.key + "=" + strconv.Quote(tt.value) + ": " + tt.msg
			if e.Code != types.ErrInvalidNetworkConfig || e.Msg != want || e.Details != "" {
				t.Errorf("code %d %q (details %q)\nwant code 7 %q", e.Code, e.Msg, e.Details, want)
			}
		})
	}
}

// TestParseNetworksAnnotationSelections: both forms give the elements in
// order, with blanks around names ignored, each marked with the
// annotation it came from; Multus' names may carry a namespace and are
// references.
func TestParseNetworksAnnotationSelections(t *testing.T) {
	tests := []struct {
		key, value string
		want       []Selection
	}{
		{NetworksAnnotation, " a , b@eth5", []Selection{{Name: "a"}, {Name: "b", Interface: "eth5"}}},
		{NetworksAnnotation, `[{"name": "a", "ips": ["10.0.0.2"], "mac": "c2:00:00:00:00:01", "cni-args": {"K": "v"}}]`,
			[]Selection{{Name: "a", IPs: []string{"10.0.0.2"}, MAC: "c2:00:00:00:00:01", CNIArgs: map[string]any{"K": "v"}}}},
		{MultusNetworksAnnotation, "team-a/a@data0,b", []Selection{{Name: "a", Namespace: "team-a", Interface: "data0"}, {Name: "b"}}},
		{MultusNetworksAnnotation, `[{"name": "a", "namespace": "team-a"}]`, []Selection{{Name: "a", Namespace: "team-a"}}},
	}
	for _, tt := range tests {
		got, e := parseNetworksAnnotation(tt.key, tt.value)
		if e != nil {
			t.Errorf("%s=%q: %v", tt.key, tt.value, e)
			continue
		}
		for i := range tt.want {
			tt.want[i].from, tt.want[i].value, tt.want[i].ref = tt.key, tt.value, tt.key == MultusNetworksAnnotation
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s=%q:\n got %+v\nwant %+v", tt.key, tt.value, got, tt.want)
		}
	}
}
