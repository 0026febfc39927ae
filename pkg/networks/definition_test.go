package networks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/kurma-project/kurma/pkg/netconfig"
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
	written := writtenDefinition(reformatted)
	if written == Definition(reformatted) {
		t.Fatal("the definition as written is today's: nothing to test")
	}
	records := []*state.Generation{{Network: "n", Generation: 3, Definition: written}, {Network: "n", Generation: 4, Definition: "other"}}
	if got := sameDefinition(records, "n", Definition(reformatted), writtenDefinition(reformatted)); got != 3 {
		t.Errorf("the generation journaled as written: %d, want 3", got)
	}
}
