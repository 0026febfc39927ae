package netconfig

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Roles of a network ("role"): what its plugin image is for.
const (
	// RoleAttach: pods attach to the network through its image's add and
	// del (the default).
	RoleAttach = "attach"
	// RolePolicy: the network's image enforces policy on the networks
	// that opt in ("network_policy"); its main executable is the policy
	// daemon. kurmad runs it as any network's generation but pods never
	// attach to it: no add, del, check or gc is ever called on it.
	RolePolicy = "policy"
)

var roles = []string{RoleAttach, RolePolicy}

// Keys of policy: a network's role, an attach network's consent to be
// policed, and what kurmad writes into the policy network's config.
const (
	keyRole           = "role"
	keyNetworkPolicy  = "network_policy"
	keyPolicyNetworks = "policy_networks"
)

// IsPolicy reports whether n is the network of role "policy": pods do not
// attach to it.
func (n *Network) IsPolicy() bool { return n.Role == RolePolicy }

// parseRole reads a network's "role".
func parseRole(ps *problems, path string, raw json.RawMessage) string {
	const want = `"attach" (pods attach to it; the default) or "policy" (its image enforces policy on the networks with "network_policy": true)`
	var s string
	if !decodeTyped(ps, path, raw, &s, "a string, "+want) {
		return ""
	}
	if !slices.Contains(roles, s) {
		msg := fmt.Sprintf("%q is not a role; use %s", s, want)
		if alt := suggest(s, roles); alt != "" {
			msg = fmt.Sprintf("%q is not a role; did you mean %q? Use %s", s, alt, want)
		}
		ps.add(path, msg)
		return ""
	}
	return s
}

// checkPolicyEntry refuses, in a policy network's entry at path, the keys
// that only make sense for a network pods attach to, and the one kurmad
// writes itself; seen holds the entry's keys.
func (n *Network) checkPolicyEntry(ps *problems, path string, seen map[string]bool) {
	if !n.IsPolicy() {
		return
	}
	for _, k := range []string{keyDefault, keyContainerInterface} {
		if seen[k] {
			ps.add(path+"."+k, fmt.Sprintf(`pods do not attach to a network of role "policy", so it takes no %q; remove the key (or set "role": "attach")`, k))
		}
	}
	if seen[keyNetworkPolicy] {
		ps.add(path+"."+keyNetworkPolicy, `a network of role "policy" enforces policy on the others, it does not opt in to it; remove the key and set "network_policy": true on the networks to police`)
	}
	if seen[keyPolicyNetworks] {
		ps.add(path+"."+keyPolicyNetworks, `kurmad writes this key into the policy network's config: the names of the networks with "network_policy": true, in config order; remove it and set "network_policy" on those networks instead`)
	}
}

// checkPolicy checks the networks' roles together: at most one network of
// role "policy", and one whenever a network opts in to policy. It gives
// the policy network the names of the networks it polices
// (PolicyNetworks), which its plugin config carries as
// "policy_networks".
func checkPolicy(ps *problems, nets []*Network) {
	var policy *Network
	var policed []string
	for _, n := range nets {
		switch {
		case n.IsPolicy() && policy != nil:
			ps.add(n.path+"."+keyRole, fmt.Sprintf(`%q is a second network of role "policy" (also %q, %s); kurmad runs one policy network, which enforces policy on every network with "network_policy": true: remove one, or set "role": "attach"`,
				n.Name, policy.Name, policy.path))
		case n.IsPolicy():
			policy = n
		case n.NetworkPolicy:
			policed = append(policed, n.Name)
		}
	}
	if policy != nil {
		policy.PolicyNetworks = policed
		return
	}
	for _, n := range nets {
		if n.NetworkPolicy {
			ps.add(n.path+"."+keyNetworkPolicy, `true needs a network of role "policy" to enforce it, and the config has none; add one, e.g. {"name": "netpol", "image": "file:///opt/kurma/images/netpol.aci", "role": "policy"}, or remove "network_policy"`)
		}
	}
}

// policyMember is what kurmad adds to a policy network's plugin config:
// "policy_networks", the networks it polices, in config order ([] for
// none).
func (n *Network) policyMember() member {
	names := n.PolicyNetworks
	if names == nil {
		names = []string{}
	}
	b, _ := json.Marshal(names)
	return member{Key: keyPolicyNetworks, Value: b}
}
