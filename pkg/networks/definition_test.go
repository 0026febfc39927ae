package networks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/state"
)

// A network's allow_syscalls is part of its definition (a change starts a
// new generation, as allow_capabilities does, in any order of the list),
// and a network without one keeps the definition it had before
// allow_syscalls existed, so an upgrade restarts nothing.
func TestDefinitionCoversAllowSyscalls(t *testing.T) {
	parse := func(entry string) *netconfig.Network {
		t.Helper()
		cfg, err := netconfig.Parse([]byte(`{"pod_networks": [`+entry+`]}`), "/")
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Networks[0]
	}
	plain := parse(`{"name": "n", "image": "file:///x.aci", "type": "loopback"}`)
	keyctl := parse(`{"name": "n", "image": "file:///x.aci", "type": "loopback", "allow_syscalls": ["keyctl", "bpf"]}`)
	reordered := parse(`{"name": "n", "image": "file:///x.aci", "type": "loopback", "allow_syscalls": ["bpf", "keyctl"]}`)
	if Definition(plain) == Definition(keyctl) {
		t.Error("allow_syscalls does not change the definition")
	}
	if Definition(keyctl) != Definition(reordered) {
		t.Error("the order of allow_syscalls changes the definition")
	}
	conf, err := plain.PluginConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(struct {
		ACI, Verify, ImageName string
		Capabilities           []string
		Config                 []byte
	}{plain.ImageURI, plain.Verify, plain.ImageName, nil, conf})
	sum := sha256.Sum256(old)
	if got := Definition(plain); got != hex.EncodeToString(sum[:]) {
		t.Errorf("a network without allow_syscalls has a new definition %s", got)
	}
}

// TestDefinitionKept: a config entry has the definition the previous
// release journaled for it, whether it names its image "image" or "aci":
// after an upgrade every network keeps its generation and its running
// container.
func TestDefinitionKept(t *testing.T) {
	const previous = "f60d9a4ec3c658377a4acd8f285299594f8d3424032d471cb646c41fa2f10ef5"
	for _, key := range []string{"image", "aci"} {
		cfg, err := netconfig.Parse([]byte(`{"pod_networks": [{"name": "n", "`+key+`": "file:///x.aci", "type": "loopback", "allow_capabilities": ["CAP_BPF"]}]}`), "/")
		if err != nil {
			t.Fatal(err)
		}
		if got := Definition(cfg.Networks[0]); got != previous {
			t.Errorf("with %q: definition %s, the previous release's %s", key, got, previous)
		}
	}
}

// TestDefinitionByMeaning: an entry re-indented, its keys reordered and a
// string's escape rewritten has the definition it had (a reload leaves its
// generation running); another value has another. A generation an earlier
// release journaled under the definition of the entry as written is still
// the entry's after an upgrade.
func TestDefinitionByMeaning(t *testing.T) {
	parse := func(entry string) *netconfig.Network {
		t.Helper()
		cfg, err := netconfig.Parse([]byte(`{"pod_networks": [`+entry+`]}`), "/")
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Networks[0]
	}
	compact := parse(`{"name": "n", "image": "file:///x.aci", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.0.0/16"}}`)
	reformatted := parse(`{
		"ipam": {
			"subnet": "10.1.0.0/16",
			"type":   "host-\u006cocal"
		},
		"type":  "bridge",
		"image": "file:///x.aci",
		"name":  "n"
	}`)
	other := parse(`{"name": "n", "image": "file:///x.aci", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.2.0.0/16"}}`)
	if Definition(compact) != Definition(reformatted) {
		t.Error("a reformatted entry has another definition")
	}
	if Definition(compact) == Definition(other) {
		t.Error("another subnet has the same definition")
	}
	if keys := netconfig.ChangedKeys(compact, other); len(keys) != 1 || keys[0] != "ipam.subnet" {
		t.Errorf("changed keys %q, want [ipam.subnet]", keys)
	}
	written := reformatted.WrittenHash()
	if written == Definition(reformatted) {
		t.Fatal("the definition as written is today's: nothing to test")
	}
	records := []*state.Generation{{Network: "n", Generation: 3, Hash: written}, {Network: "n", Generation: 4, Hash: "other"}}
	if got := sameDefinition(records, "n", Definition(reformatted), reformatted.WrittenHash()); got != 3 {
		t.Errorf("the generation journaled as written: %d, want 3", got)
	}
}

// TestReloadNetworkPolicy: turning a network's network_policy on or off
// keeps that network's generation (it is not part of its definition: its
// container keeps running) and updates it in place, but starts a new
// generation of the policy network, whose config lists the networks it
// polices; role is part of the definition.
func TestReloadNetworkPolicy(t *testing.T) {
	dir := t.TempDir()
	podnet := map[string]any{"name": "podnet", "image": "file:///x.aci", "default": true, "type": "bridge"}
	netpol := map[string]any{"name": "netpol", "image": "file:///n.aci", "role": "policy", "cluster_network": "podnet"}
	c := newController(t, testConfig(t, dir, podnet, netpol), "/bin/true")
	if _, start := c.diff(c.Config()); len(start) != 2 {
		t.Fatalf("first diff starts %d generations, want 2", len(start))
	}
	serving := func(name string) *generation {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.nets[name].serving
	}
	podnet1, netpol1 := serving("podnet"), serving("netpol")
	if got := string(netpol1.spec.Config); got != `{"cluster_network":"podnet","name":"netpol","policy_networks":[]}` {
		t.Errorf("netpol's config %s", got)
	}

	podnet["network_policy"] = true
	res, start := c.diff(testConfig(t, dir, podnet, netpol))
	if !slices.Equal(res.Updated, []string{"podnet"}) || !slices.Equal(res.Replaced, []string{"netpol"}) || len(start) != 1 || start[0].key.Network != "netpol" {
		t.Fatalf("podnet opting in: %+v, starts %v; want podnet updated in place, netpol replaced", res, start)
	}
	if got := res.Keys; !slices.Equal(got["podnet"], []string{"network_policy"}) ||
		!slices.Equal(got["netpol"], []string{"policy_networks (the networks with network_policy)"}) {
		t.Errorf("podnet opting in: changes %q, want podnet's network_policy and netpol's policy_networks", got)
	}
	if g := serving("podnet"); g != podnet1 || g.key.Generation != 1 || !g.entry.NetworkPolicy {
		t.Errorf("podnet after opting in: generation %d (same %v), network_policy %v; want generation 1 kept, the entry updated",
			g.key.Generation, g == podnet1, g.entry.NetworkPolicy)
	}
	netpol2 := start[0]
	if netpol2.key.Generation != 2 || string(netpol2.spec.Config) != `{"cluster_network":"podnet","name":"netpol","policy_networks":["podnet"]}` {
		t.Errorf("netpol's new generation %d runs %s", netpol2.key.Generation, netpol2.spec.Config)
	}
	if netpol2.def == netpol1.def {
		t.Error("netpol's definition did not change with the networks it polices")
	}

	delete(podnet, "network_policy")
	res, start = c.diff(testConfig(t, dir, podnet, netpol))
	if !slices.Equal(res.Updated, []string{"podnet"}) || !slices.Equal(res.Replaced, []string{"netpol"}) || len(start) != 1 {
		t.Fatalf("podnet opting out: %+v, starts %d", res, len(start))
	}
	if g := serving("podnet"); g != podnet1 {
		t.Errorf("podnet opting out got generation %d", g.key.Generation)
	}

	// The same entry as an attach network is another definition.
	attach := map[string]any{"name": "netpol", "image": "file:///n.aci", "cluster_network": "podnet"}
	cfg := testConfig(t, dir, podnet, attach)
	pol, _ := c.Config().Network("netpol")
	att, _ := cfg.Network("netpol")
	if Definition(pol) == Definition(att) {
		t.Error("role is not part of the definition")
	}
}

// A generation record as the release before gendef wrote it (its
// networks.record, for the entry of TestUpgradeRecord), byte for byte.
const previousRecord = `{"network":"full","generation":7,"definition":"d409babc441c3ee6352cfeb44d8c8fb30b2936be644c56658fe0372d1452927b",` +
	`"image":"sha256-0123abcd","config":"eyJuYW1lIjoiZnVsbCIsImNuaVZlcnNpb24iOiIxLjAuMCIsInR5cGUiOiJicmlkZ2UiLCJpcGFtIjp7InN1Ym5ldCI6ICIxMC4xLjAuMC8xNiIsICJ0eXBlIjogImhvc3QtbG9jYWwifX0=",` +
	`"allow_capabilities":["CAP_SYS_MODULE","CAP_BPF"],"allow_syscalls":["keyctl","bpf"],` +
	`"limits":{"pids":2048,"memory":536870912,"call_pids":-1,"call_memory":67108864,"tmpfs":16777216,"writable_layer":33554432,"state_dir":134217728},` +
	`"main_sees_pods":true,"kubernetes_credentials":true}`

// TestUpgradeRecord: after an upgrade, a config entry with every key of
// a definition set has the hash the previous release journaled for it,
// its record reads back as the entry's definition (the image by its ID),
// and the record this release writes for it is the previous one's, byte
// for byte.
func TestUpgradeRecord(t *testing.T) {
	cfg, err := netconfig.Parse([]byte(`{"pod_networks": [
	{"name": "full", "image": "docker://example.com/kurma/cni:v1", "verify": "if-signed", "image_name": "example.com/kurma/cni",
	 "allow_capabilities": ["CAP_SYS_MODULE", "CAP_BPF"], "allow_syscalls": ["keyctl", "bpf"], "kubernetes_credentials": true,
	 "main_sees_pods": true, "network_policy": true,
	 "limits": {"pids": 2048, "memory": "512Mi", "call_pids": 0, "call_memory": "64Mi", "tmpfs": "16Mi", "writable_layer": "32Mi", "state_dir": "128Mi"},
	 "cniVersion": "1.0.0", "type":   "bridge", "ipam": {"subnet": "10.1.0.0/16", "type": "host-local"}},
	{"name": "netpol", "image": "file:///n.aci", "role": "policy", "cluster_network": "full"}
	]}`), "/")
	if err != nil {
		t.Fatal(err)
	}
	hashes := map[string][2]string{ // the previous release's, by meaning and as written
		"full":   {"d409babc441c3ee6352cfeb44d8c8fb30b2936be644c56658fe0372d1452927b", "3a80b84f6b7fe1b29c9016a20f6c112992a37867e1d0cfbd700b1e1e8e5d358a"},
		"netpol": {"157926cdb3b946eab4b4a4a452bcbbf296c59e1cd7679e6a25641c34b8b8e75e", "f4195a55cbb5ff877071101ac66cb15a5f6c4606304bd91dc1788af3a5f201e3"},
	}
	for _, n := range cfg.Networks {
		if got, want := [2]string{Definition(n), n.WrittenHash()}, hashes[n.Name]; got != want {
			t.Errorf("%s: definition %s (as written %s), the previous release's %s (%s)", n.Name, got[0], got[1], want[0], want[1])
		}
	}
	var rec state.Generation
	if err := json.Unmarshal([]byte(previousRecord), &rec); err != nil {
		t.Fatal(err)
	}
	full, _ := cfg.Network("full")
	want := full.Definition
	want.Source, want.Image = gendef.Source{}, gendef.Ref("sha256-0123abcd")
	if rec.Hash != Definition(full) || !reflect.DeepEqual(rec.Definition, want) {
		t.Errorf("the previous record reads as %s %+v; want %s %+v", rec.Hash, rec.Definition, Definition(full), want)
	}
	// What this release journals for the entry's generation.
	c := newController(t, testConfig(t, t.TempDir(), map[string]any{"name": "other", "image": "file:///x.aci", "type": "loopback"}), "/bin/true")
	g := &generation{key: netplugin.Target{Network: "full", Generation: 7}, def: Definition(full),
		spec: networkpod.Spec{Network: "full", Generation: 7, Definition: full.Definition}}
	g.spec.Image = &gendef.Image{ID: "sha256-0123abcd", Rootfs: "/store/rootfs"}
	c.record(g)
	recs, err := c.opts.Store.Generations()
	if err != nil || len(recs) != 1 {
		t.Fatalf("journaled %v, %v", recs, err)
	}
	if b, _ := json.Marshal(recs[0]); string(b) != previousRecord {
		t.Errorf("this release journals\n%s\nthe previous one\n%s", b, previousRecord)
	}
}
