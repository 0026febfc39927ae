package netconfig

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// PluginConfig returns the bytes the network's plugin gets on stdin: the
// entry exactly as written without kurma's keys (kurmaEntryKeys: image,
// default, limits, ...), every other key in its order with its value byte-for-byte, and args merged into "args"."cni"
// following the CNI conventions (an argument given here replaces the
// entry's value for the same key). Nothing else is added: an entry without
// "cniVersion" gets none, and the plugin image decides what that means;
// but the policy network's config ends with "policy_networks", the
// networks it polices. setup gets PluginConfig(nil).
func (n *Network) PluginConfig(args []Arg) ([]byte, error) {
	ms := n.members
	if ms == nil {
		// A Network built by hand rather than parsed.
		ms = []member{{Key: keyName, Value: encodeString(n.Name)}}
	}
	out := make([]member, 0, len(ms)+1)
	for _, m := range ms {
		if !slices.Contains(kurmaEntryKeys, m.Key) {
			out = append(out, m)
		}
	}
	if n.IsPolicy() {
		out = append(out, n.policyMember())
	}
	if len(args) > 0 {
		var err error
		if out, err = mergeArgs(out, args); err != nil {
			return nil, &netplugin.NetworkError{Network: n.Name, Err: err}
		}
	}
	return encodeObject(out), nil
}

// WithKey returns the plugin config conf (a JSON object, as PluginConfig
// gives it) with key set to value: in its place when conf has it, else
// added at the end; every other key and value stays as it was written.
// kurmad uses it for what the image contract adds to some verbs' stdin
// (check's prevResult, gc's valid attachments).
func WithKey(conf []byte, key string, value json.RawMessage) ([]byte, error) {
	ms, err := decodeObject(conf)
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	if !json.Valid(value) {
		return nil, fmt.Errorf("plugin config: the value for %q is not JSON", key)
	}
	return encodeObject(setMember(ms, key, value)), nil
}

// setMember sets key to value in ms: in its place when ms has it, else
// added at the end.
func setMember(ms []member, key string, value json.RawMessage) []member {
	if i := slices.IndexFunc(ms, func(m member) bool { return m.Key == key }); i >= 0 {
		ms[i].Value = value
		return ms
	}
	return append(ms, member{Key: key, Value: value})
}

// mergeArgs puts args into ms' "args"."cni" object, creating what is missing
// at the end of its parent and keeping the order of existing keys.
func mergeArgs(ms []member, args []Arg) ([]member, error) {
	seen := map[string]bool{}
	for _, a := range args {
		if a.Key == "" {
			return nil, fmt.Errorf("argument with an empty key (value %q)", a.Value)
		}
		if seen[a.Key] {
			return nil, fmt.Errorf("argument %q given twice", a.Key)
		}
		seen[a.Key] = true
	}
	ms = slices.Clone(ms)
	i := slices.IndexFunc(ms, func(m member) bool { return m.Key == keyArgs })
	var argsObj []member
	if i >= 0 {
		var err error
		if argsObj, err = decodeObject(ms[i].Value); err != nil {
			return nil, fmt.Errorf(`"args" must be an object to take per-pod arguments: %w`, err)
		}
	}
	j := slices.IndexFunc(argsObj, func(m member) bool { return m.Key == "cni" })
	var cni []member
	if j >= 0 {
		var err error
		if cni, err = decodeObject(argsObj[j].Value); err != nil {
			return nil, fmt.Errorf(`"args"."cni" must be an object to take per-pod arguments: %w`, err)
		}
	}
	for _, a := range args {
		v := encodeString(a.Value)
		if k := slices.IndexFunc(cni, func(m member) bool { return m.Key == a.Key }); k >= 0 {
			cni[k].Value = v
		} else {
			cni = append(cni, member{Key: a.Key, Value: v})
		}
	}
	cniRaw := encodeObject(cni)
	if j >= 0 {
		argsObj[j].Value = cniRaw
	} else {
		argsObj = append(argsObj, member{Key: "cni", Value: cniRaw})
	}
	argsRaw := encodeObject(argsObj)
	if i >= 0 {
		ms[i].Value = argsRaw
	} else {
		ms = append(ms, member{Key: keyArgs, Value: argsRaw})
	}
	return ms, nil
}

// ParseNetworkRef parses a network reference from a pod request:
// "name" or "name:KEY=VALUE;KEY=VALUE" (e.g. "mynet:IP=10.10.0.9").
func ParseNetworkRef(ref string) (name string, args []Arg, err error) {
	name, rest, hasArgs := strings.Cut(ref, ":")
	if name == "" {
		return "", nil, fmt.Errorf("network reference %q: empty network name; write it as name or name:KEY=VALUE;KEY=VALUE", ref)
	}
	if msg := checkName(name); msg != "" {
		return "", nil, fmt.Errorf("network reference %q: %s", ref, msg)
	}
	if !hasArgs {
		return name, nil, nil
	}
	if rest == "" {
		return "", nil, fmt.Errorf("network reference %q: no arguments after ':'; drop the ':' or write KEY=VALUE pairs such as %s:IP=10.10.0.9", ref, name)
	}
	seen := map[string]bool{}
	for _, pair := range strings.Split(rest, ";") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return "", nil, fmt.Errorf("network reference %q: %q is not a KEY=VALUE pair; separate pairs with ';', e.g. %s:IP=10.10.0.9;K=V", ref, pair, name)
		}
		if seen[k] {
			return "", nil, fmt.Errorf("network reference %q: argument %q given twice", ref, k)
		}
		seen[k] = true
		args = append(args, Arg{Key: k, Value: v})
	}
	return name, args, nil
}
