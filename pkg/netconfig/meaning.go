package netconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// maxChangedKeys bounds what ChangedKeys lists: past it, the rest is one
// "..." (a reload line names what changed, it is no diff tool).
const maxChangedKeys = 8

// ChangedKeys lists where network entries a and b (of one network, an
// old config's and a new one's) differ in meaning, in b's key order: a key
// of the entry ("image", "default"), or the path to what changed inside
// one ("ipam.subnet", "plugins[0].bridge"). "aci" is read as "image",
// its alias. A setting the entry inherits (the top-level verify) or
// kurmad writes (the policy network's policy_networks) shows when it
// changed the entry's. Nil when they mean the same.
func ChangedKeys(a, b *Network) []string {
	var out []string
	if a.members != nil && b.members != nil {
		diffValues("", encodeObject(imageKey(a.members)), encodeObject(imageKey(b.members)), &out)
	}
	if a.ImageURI != b.ImageURI && !slices.Contains(out, keyImage) {
		out = append(out, keyImage)
	}
	if a.Verify != b.Verify && !slices.Contains(out, keyVerify) {
		out = append(out, keyVerify+" (the top-level one)")
	}
	// kurmad writes the policy network's policy_networks from the other
	// entries' network_policy: a change there is one of its config.
	if a.IsPolicy() && b.IsPolicy() && !slices.Equal(a.PolicyNetworks, b.PolicyNetworks) {
		out = append(out, keyPolicyNetworks+" (the networks with network_policy)")
	}
	if len(out) > maxChangedKeys {
		out = append(out[:maxChangedKeys], "...")
	}
	return out
}

// imageKey is ms with "aci" named "image".
func imageKey(ms []member) []member {
	out := slices.Clone(ms)
	for i := range out {
		if out[i].Key == keyACI {
			out[i].Key = keyImage
		}
	}
	return out
}

// diffValues adds to out the paths under path where a and b differ in
// meaning: into objects key by key, into lists of one length element by
// element; a value of another kind or a list of another length is one
// change at its path.
func diffValues(path string, a, b json.RawMessage, out *[]string) {
	ca, errA := gendef.Canonical(a)
	cb, errB := gendef.Canonical(b)
	if errA == nil && errB == nil && bytes.Equal(ca, cb) {
		return
	}
	if ma, err := decodeObject(a); err == nil {
		if mb, err := decodeObject(b); err == nil {
			keys := []string{}
			// In the new entry's order, then what only the old one has.
			for _, m := range append(slices.Clone(mb), ma...) {
				if !slices.Contains(keys, m.Key) {
					keys = append(keys, m.Key)
				}
			}
			for _, k := range keys {
				va, vb := valueOf(ma, k), valueOf(mb, k)
				if va == nil || vb == nil {
					*out = append(*out, join(path, k))
					continue
				}
				diffValues(join(path, k), va, vb, out)
			}
			return
		}
	}
	if la, err := decodeArray(a); err == nil && strings.HasPrefix(strings.TrimSpace(string(a)), "[") {
		if lb, err := decodeArray(b); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "[") && len(la) == len(lb) {
			for i := range la {
				diffValues(fmt.Sprintf("%s[%d]", path, i), la[i], lb[i], out)
			}
			return
		}
	}
	*out = append(*out, path)
}

func valueOf(ms []member, key string) json.RawMessage {
	for _, m := range ms {
		if m.Key == key {
			return m.Value
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
