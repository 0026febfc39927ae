package netconfig

import (
	"encoding/json"
	"slices"
	"sort"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// RuntimeConfig is one pod's capability arguments for one network, CNI's
// "runtimeConfig": capability name ("portMappings", "ips", "mac",
// "bandwidth", "ipRanges", "dns", "aliases", or any other) → its value as
// JSON.
type RuntimeConfig map[string]json.RawMessage

// keyRuntimeConfig is where the arguments go in the plugin's config, and
// keyCapabilities where a plugin config declares the ones it takes.
const (
	keyRuntimeConfig = "runtimeConfig"
	keyCapabilities  = "capabilities"
	keyPlugins       = "plugins"
	keyType          = "type"
	// loopbackType is CNI's loopback plugin (see MakesInterface).
	loopbackType = "loopback"
)

// MakesInterface is false for a network whose plugins are all CNI's
// loopback (its "type", or every plugin's of a conflist): it brings up
// lo rather than making an interface, so it takes no ethN, and no
// runtime's CNI_IFNAME, from the networks after it.
func (n *Network) MakesInterface() bool {
	var types []string
	for _, m := range n.members {
		switch m.Key {
		case keyType:
			var t string
			_ = json.Unmarshal(m.Value, &t)
			types = append(types, t)
		case keyPlugins:
			var plugins []struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(m.Value, &plugins) != nil {
				return true
			}
			for _, p := range plugins {
				types = append(types, p.Type)
			}
		}
	}
	return len(types) == 0 || slices.ContainsFunc(types, func(t string) bool { return t != loopbackType })
}

// CNICapabilities returns the CNI capabilities the network's plugin config
// declares, sorted: the keys set to true in its "capabilities" object, or,
// for a conflist, in any of its plugins' (the union). These, and only
// these, are the runtimeConfig keys PluginConfigFor passes on, as libcni
// does. A value that is not an object of booleans declares nothing.
func (n *Network) CNICapabilities() []string {
	set := map[string]bool{}
	for _, m := range n.members {
		switch m.Key {
		case keyCapabilities:
			addCapabilities(set, m.Value)
		case keyPlugins:
			var plugins []struct {
				Capabilities json.RawMessage `json:"capabilities"`
			}
			if json.Unmarshal(m.Value, &plugins) != nil {
				continue
			}
			for _, p := range plugins {
				addCapabilities(set, p.Capabilities)
			}
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func addCapabilities(set map[string]bool, raw json.RawMessage) {
	var caps map[string]bool
	if len(raw) == 0 || json.Unmarshal(raw, &caps) != nil {
		return
	}
	for c, on := range caps {
		if on {
			set[c] = true
		}
	}
}

// PluginConfigFor is PluginConfig(args) with the pod's capability arguments
// placed as CNI's "runtimeConfig" at the top of the config: only those whose
// capability the network declares (CNICapabilities), as libcni injects
// them; the others are dropped and returned, sorted, so the caller can say
// so. With nothing to place the bytes are PluginConfig's exactly. A
// runtimeConfig the entry itself holds is replaced.
func (n *Network) PluginConfigFor(args []Arg, rc RuntimeConfig) (stdin []byte, dropped []string, err error) {
	stdin, err = n.PluginConfig(args)
	if err != nil || len(rc) == 0 {
		return stdin, nil, err
	}
	declared := n.CNICapabilities()
	var placed []member
	for _, k := range sortedKeys(rc) {
		if !slices.Contains(declared, k) {
			dropped = append(dropped, k)
			continue
		}
		placed = append(placed, member{Key: k, Value: rc[k]})
	}
	if len(placed) == 0 {
		return stdin, dropped, nil
	}
	ms, err := decodeObject(stdin)
	if err != nil {
		return nil, nil, &netplugin.NetworkError{Network: n.Name, Op: "plugin config", Err: err}
	}
	return encodeObject(setMember(ms, keyRuntimeConfig, encodeObject(placed))), dropped, nil
}

func sortedKeys(rc RuntimeConfig) []string {
	keys := make([]string, 0, len(rc))
	for k := range rc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
