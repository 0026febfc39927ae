package kurmacni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
)

// Networks chosen per pod. Kubernetes has no field for a pod's networks;
// as multus does, a pod names them in an annotation, and the runtime
// hands kurma-cni the pod's annotations as a capability argument:
// containerd's CRI and CRI-O both pass them, as a JSON object, under
// PodAnnotationsCapability when the conflist's entry declares it
// ("capabilities": {"io.kubernetes.cri.pod-annotations": true}).
const (
	// NetworksAnnotation names the kurma networks a pod joins besides its
	// cluster network (the conflist's "network", always its first
	// attachment, CNI_IFNAME): names separated by commas ("webnet,mynet",
	// "webnet@eth5" for an interface of the pod's choice), or multus'
	// JSON selection form, a list of Selection. Each gets net1, net2, ...
	// unless it names its interface.
	NetworksAnnotation = "kurma.dev/networks"
	// ClusterNetworkAnnotation replaces the pod's cluster network: the
	// kurma network (or networks, separated by commas) that takes
	// CNI_IFNAME instead of the conflist's "network". An explicit choice,
	// never the side effect of naming a network in NetworksAnnotation.
	ClusterNetworkAnnotation = "kurma.dev/cluster-network"
	// PodAnnotationsCapability is the capability argument (runtimeConfig
	// key) under which containerd and CRI-O pass a pod's annotations.
	PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"
	// MultusNetworksAnnotation is Multus' annotation for the networks a
	// pod joins besides its cluster network, taken as Multus takes it:
	// NetworkAttachmentDefinitions by name ("macvlan-conf"), namespace and
	// name ("team-a/macvlan-conf"), either with an interface
	// ("macvlan-conf@data0"), or Multus' JSON form, whose elements may name
	// a "namespace". Each is a reference kurma-node resolves (NetworkRef):
	// the NetworkAttachmentDefinition of that namespace (the pod's when
	// none is named), else, when no namespace is named, the kurma network
	// of that name. They come after NetworksAnnotation's networks.
	MultusNetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// MultusDefaultNetworkAnnotation is Multus' annotation replacing the
	// pod's cluster network: one reference ("[namespace/]name"), resolved
	// as MultusNetworksAnnotation's are. It and ClusterNetworkAnnotation
	// exclude each other.
	MultusDefaultNetworkAnnotation = "v1.multus-cni.io/default-network"
)

// NetworkRef is a network a pod names through Multus' annotations: a
// NetworkAttachmentDefinition's namespace ("" for the pod's own) and name.
type NetworkRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (r NetworkRef) String() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// key is where a reference stands among a selection's network names
// until it is resolved: no network's name starts with a NUL.
func (r NetworkRef) key() string { return "\x00" + r.Namespace + "/" + r.Name }

// Selection is one element of NetworksAnnotation's JSON form, multus'
// NetworkSelectionElement: the network, and what the pod asks of its
// attachment.
type Selection struct {
	// Name is the kurma network's name.
	Name string `json:"name"`
	// Namespace is refused when set: kurma's networks are cluster-wide
	// (multus' NetworkAttachmentDefinitions are namespaced).
	Namespace string `json:"namespace,omitempty"`
	// Interface is the attachment's interface name in the pod; "" → netN.
	Interface string `json:"interface,omitempty"`
	// IPs are the addresses the pod asks for (CIDRs or plain IPs), passed
	// as the "ips" capability argument: the network's config must declare
	// "capabilities": {"ips": true} (host-local, static take it).
	IPs []string `json:"ips,omitempty"`
	// MAC is the interface's MAC address, passed as the "mac" capability
	// argument (the network's config must declare it).
	MAC string `json:"mac,omitempty"`
	// DefaultRoute is refused: the pod's default route is its cluster
	// network's.
	DefaultRoute []string `json:"default-route,omitempty"`
	// CNIArgs are the network's per-pod arguments, strings each, passed as
	// CNI_ARGS (args.cni in its config).
	CNIArgs map[string]any `json:"cni-args,omitempty"`

	// from and value are the annotation the element was read from; ref is
	// set for MultusNetworksAnnotation's, whose Namespace and Name are a
	// reference to resolve.
	from, value string
	ref         bool
}

// networkKey is the element's network among a selection's names: its
// name, or its reference's key until resolved.
func (s *Selection) networkKey() string {
	if s.ref {
		return NetworkRef{Namespace: s.Namespace, Name: s.Name}.key()
	}
	return s.Name
}

// podNetworks is what ADD attaches, in order: the cluster network (the
// conflist's "network", or the pod's ClusterNetworkAnnotation or
// MultusDefaultNetworkAnnotation), then the networks of its
// NetworksAnnotation and then of its MultusNetworksAnnotation not already
// among them, when the runtime passed the pod's annotations. A malformed
// annotation is CNI code 7 naming it and the element at fault; networks it
// names that kurmad does not have fail in kurmad before anything is
// attached (400 unknown_network, also code 7). Multus' references stay to
// be resolved (podSelection.resolve).
func (c *NetConf) podNetworks(ifname string) (*podSelection, *types.Error) {
	sel := &podSelection{networks: slices.Clone(c.Networks)}
	raw, ok := c.RuntimeConfig[PodAnnotationsCapability]
	if !ok {
		return sel, nil
	}
	var annotations map[string]string
	if err := json.Unmarshal(raw, &annotations); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: runtimeConfig %q must be an object of strings (the pod's annotations)", PodAnnotationsCapability), err.Error())
	}
	kurmaDefault, hasKurma := annotations[ClusterNetworkAnnotation]
	multusDefault, hasMultus := annotations[MultusDefaultNetworkAnnotation]
	switch {
	case hasKurma && hasMultus:
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"kurma-cni: pod annotations %s=%q and %s=%q both replace the pod's cluster network; keep one", ClusterNetworkAnnotation, kurmaDefault, MultusDefaultNetworkAnnotation, multusDefault), "")
	case hasKurma:
		names, e := parseNames(ClusterNetworkAnnotation, kurmaDefault)
		if e != nil {
			return nil, e
		}
		sel.networks = names
	case hasMultus:
		r, e := parseDefaultRef(multusDefault)
		if e != nil {
			return nil, e
		}
		sel.networks = []string{r.key()}
		sel.refs = map[string]NetworkRef{r.key(): r}
	}
	var all []Selection
	for _, key := range []string{NetworksAnnotation, MultusNetworksAnnotation} {
		value, ok := annotations[key]
		if !ok {
			continue
		}
		selections, e := parseNetworksAnnotation(key, value)
		if e != nil {
			return nil, e
		}
		all = append(all, selections...)
	}
	return sel, sel.add(all, ifname)
}

// parseDefaultRef reads MultusDefaultNetworkAnnotation's value: one
// "[namespace/]name".
func parseDefaultRef(value string) (NetworkRef, *types.Error) {
	invalid := func(format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: pod annotation %s=%q: ", MultusDefaultNetworkAnnotation, value)+fmt.Sprintf(format, args...), "")
	}
	v := strings.TrimSpace(value)
	ns, name, qualified := strings.Cut(v, "/")
	if !qualified {
		ns, name = "", v
	}
	if name == "" || strings.ContainsAny(name, ",@[") {
		return NetworkRef{}, invalid(`names one network as "name" or "namespace/name"`)
	}
	if e := utils.ValidateNetworkName(name); e != nil {
		return NetworkRef{}, invalid("%q is not a network's name: %s", name, e.Msg)
	}
	if qualified && !validNamespace(ns) {
		return NetworkRef{}, invalid("%q is not a namespace's name", ns)
	}
	return NetworkRef{Namespace: ns, Name: name}, nil
}

// podSelection is the networks a pod joins and what it asked of each.
type podSelection struct {
	networks []string
	// interfaces, runtimeConfig and args are per network name.
	interfaces    map[string]string
	runtimeConfig map[string]map[string]json.RawMessage
	args          map[string][]string // "K=V"
	// refs are the Multus references among networks, by their key
	// (NetworkRef.key), until resolve names their networks.
	refs map[string]NetworkRef
}

// add appends the annotations' selections after the cluster networks:
// one naming a cluster network is that network (it may ask nothing of
// it), the others get their interface or net1, net2, ... in order.
func (s *podSelection) add(selections []Selection, ifname string) *types.Error {
	invalid := func(i int, format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: pod annotation %s=%q: element %d (%q): ", selections[i].from, selections[i].value, i, selections[i].Name)+fmt.Sprintf(format, args...), "")
	}
	taken := map[string]bool{ifname: true}
	for _, sl := range selections {
		if sl.Interface != "" {
			if taken[sl.Interface] && sl.Interface != ifname {
				return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("kurma-cni: pod annotations %s and %s both ask for interface %q", NetworksAnnotation, MultusNetworksAnnotation, sl.Interface), "")
			}
			taken[sl.Interface] = true
		}
	}
	n := 1
	for i, sl := range selections {
		key := sl.networkKey()
		if slices.Contains(s.networks, key) {
			if sl.from != NetworksAnnotation {
				return invalid(i, "the network is named twice")
			}
			if sl.Interface != "" || len(sl.IPs) > 0 || sl.MAC != "" || len(sl.CNIArgs) > 0 {
				return invalid(i, "it is the pod's cluster network (%s), whose attachment the runtime's conflist sets; ask for interfaces, IPs, a MAC or arguments of the networks added to it", ifname)
			}
			continue
		}
		s.networks = append(s.networks, key)
		if sl.ref {
			if s.refs == nil {
				s.refs = map[string]NetworkRef{}
			}
			s.refs[key] = NetworkRef{Namespace: sl.Namespace, Name: sl.Name}
		}
		name := sl.Interface
		for name == "" {
			if c := fmt.Sprintf("net%d", n); !taken[c] {
				name = c
			}
			n++
		}
		if s.interfaces == nil {
			s.interfaces = map[string]string{}
		}
		s.interfaces[key] = name
		rc := map[string]json.RawMessage{}
		if len(sl.IPs) > 0 {
			rc["ips"], _ = json.Marshal(sl.IPs)
		}
		if sl.MAC != "" {
			rc["mac"], _ = json.Marshal(sl.MAC)
		}
		if len(rc) > 0 {
			if s.runtimeConfig == nil {
				s.runtimeConfig = map[string]map[string]json.RawMessage{}
			}
			s.runtimeConfig[key] = rc
		}
		keys := make([]string, 0, len(sl.CNIArgs))
		for k := range sl.CNIArgs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if s.args == nil {
				s.args = map[string][]string{}
			}
			s.args[key] = append(s.args[key], k+"="+sl.CNIArgs[k].(string))
		}
	}
	return nil
}

// kurmaNames are the selection's networks named as kurma networks, not
// references still to resolve.
func (s *podSelection) kurmaNames() []string {
	var out []string
	for _, n := range s.networks {
		if _, ok := s.refs[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// references are the selection's Multus references, in order.
func (s *podSelection) references() []NetworkRef {
	var out []NetworkRef
	for _, n := range s.networks {
		if r, ok := s.refs[n]; ok {
			out = append(out, r)
		}
	}
	return out
}

// resolve puts in place of each reference the kurma network named for it
// in names, one per reference (references' order); without names (no
// node agent to ask), a reference without a namespace names the kurma
// network of its name, and one with a namespace cannot be resolved. A
// network then named twice is refused: code 7, naming it.
func (s *podSelection) resolve(names []string) *types.Error {
	refs := s.references()
	if len(refs) == 0 {
		return nil
	}
	if names == nil {
		for _, r := range refs {
			if r.Namespace != "" {
				return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
					"kurma-cni: pod annotation %s: %q names a NetworkAttachmentDefinition of namespace %q, which only kurma-node resolves (the conflist's \"node_agent\", on a Kubernetes node)", MultusNetworksAnnotation, r.String(), r.Namespace), "")
			}
			names = append(names, r.Name)
		}
	}
	if len(names) != len(refs) {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("kurma-cni: kurma-node resolved %d of the pod's %d network references", len(names), len(refs)), "")
	}
	to := map[string]string{}
	for i, r := range refs {
		to[r.key()] = names[i]
	}
	seen := map[string]string{}
	for i, n := range s.networks {
		name, ok := to[n]
		if !ok {
			name = n
		}
		if prev, dup := seen[name]; dup {
			return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("kurma-cni: the pod names network %q twice (%s and %s)", name, prev, refName(s.refs, n)), "")
		}
		seen[name] = refName(s.refs, n)
		if !ok {
			continue
		}
		s.networks[i] = name
		if v, ok := s.interfaces[n]; ok {
			delete(s.interfaces, n)
			s.interfaces[name] = v
		}
		if v, ok := s.runtimeConfig[n]; ok {
			delete(s.runtimeConfig, n)
			s.runtimeConfig[name] = v
		}
		if v, ok := s.args[n]; ok {
			delete(s.args, n)
			s.args[name] = v
		}
	}
	s.refs = nil
	return nil
}

// refName is how a selection's network n reads in a message: its
// reference, or its name.
func refName(refs map[string]NetworkRef, n string) string {
	if r, ok := refs[n]; ok {
		return fmt.Sprintf("%q (%s)", r.String(), MultusNetworksAnnotation)
	}
	return fmt.Sprintf("%q", n)
}

// namespaceRE is a Kubernetes namespace's name (a DNS-1123 label).
var namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func validNamespace(ns string) bool { return len(ns) <= 63 && namespaceRE.MatchString(ns) }

// parseNetworksAnnotation reads the value of NetworksAnnotation or
// MultusNetworksAnnotation (key): multus' JSON form (a list of Selection)
// when it starts with '[', else names separated by commas, blanks around
// them ignored, each "name" or "name@interface", and for Multus'
// annotation "namespace/name" too. Every element is checked, none twice.
func parseNetworksAnnotation(key, value string) ([]Selection, *types.Error) {
	multus := key == MultusNetworksAnnotation
	invalid := func(format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: pod annotation %s=%q: ", key, value)+fmt.Sprintf(format, args...), "")
	}
	trimmed := strings.TrimSpace(value)
	if trimmed == "" {
		return nil, invalid(`names no network; list kurma networks separated by commas, e.g. "webnet,mynet", or remove the annotation`)
	}
	var out []Selection
	var e *types.Error
	if strings.HasPrefix(trimmed, "[") {
		out, e = decodeSelections(trimmed, invalid)
	} else {
		out, e = splitSelections(value, multus, invalid)
	}
	if e != nil {
		return nil, e
	}
	for i := range out {
		out[i].from, out[i].value, out[i].ref = key, value, multus
	}
	c := selectionCheck{multus: multus}
	for i, s := range out {
		if s.Name == "" {
			return nil, invalid("element %d has no network name", i)
		}
		if err := c.check(s); err != nil {
			return nil, invalid("element %d (%q): %v", i, s.Name, err)
		}
	}
	return out, nil
}

// decodeSelections reads an annotation's JSON form: a list of at least
// one Selection, with no key Selection lacks.
func decodeSelections(trimmed string, invalid func(format string, args ...any) *types.Error) ([]Selection, *types.Error) {
	var out []Selection
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, invalid("not a JSON list of network selections (name, interface, ips, mac, cni-args): %v", err)
	}
	if len(out) == 0 {
		return nil, invalid("names no network")
	}
	return out, nil
}

// splitSelections reads an annotation's short form: entries separated by
// commas, each "name" or "name@interface", and for Multus' annotation
// (multus) "namespace/name" too.
func splitSelections(value string, multus bool, invalid func(format string, args ...any) *types.Error) ([]Selection, *types.Error) {
	var out []Selection
	for i, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, invalid("entry %d is empty", i)
		}
		name, ifname, _ := strings.Cut(entry, "@")
		ns := ""
		if multus {
			if n, m, ok := strings.Cut(name, "/"); ok {
				ns, name = n, m
			}
		}
		out = append(out, Selection{Name: name, Namespace: ns, Interface: ifname})
	}
	return out, nil
}

// selectionCheck checks an annotation's elements in order, remembering
// the networks and interfaces the ones before asked for.
type selectionCheck struct {
	multus         bool // MultusNetworksAnnotation's: a namespace is allowed
	names, ifnames []string
}

// check says what is wrong with s, a named element, the first of: its
// name, the network listed twice, its namespace, its interface, ips, mac,
// default route and cni-args.
func (c *selectionCheck) check(s Selection) error {
	if e := utils.ValidateNetworkName(s.Name); e != nil {
		return fmt.Errorf("not a kurma network's name: %s", e.Msg)
	}
	id := s.Namespace + "/" + s.Name
	if slices.Contains(c.names, id) {
		return errors.New("the network is listed twice")
	}
	c.names = append(c.names, id)
	switch {
	case s.Namespace != "" && !c.multus:
		return fmt.Errorf(`"namespace" %q: kurma networks are cluster-wide (kubectl get networks.kurma.dev); drop it, or name a NetworkAttachmentDefinition in %s`, s.Namespace, MultusNetworksAnnotation)
	case s.Namespace != "" && !validNamespace(s.Namespace):
		return fmt.Errorf("%q is not a namespace's name", s.Namespace)
	}
	if s.Interface != "" {
		if e := utils.ValidateInterfaceName(s.Interface); e != nil {
			return fmt.Errorf("interface %q: %s", s.Interface, e.Msg)
		}
		if slices.Contains(c.ifnames, s.Interface) {
			return fmt.Errorf("interface %q is asked for twice", s.Interface)
		}
		c.ifnames = append(c.ifnames, s.Interface)
	}
	return checkAttachment(s)
}

// checkAttachment says what is wrong with what s asks of its attachment
// (ips, mac, default route, cni-args), the first of them.
func checkAttachment(s Selection) error {
	for _, ip := range s.IPs {
		if _, _, err := net.ParseCIDR(ip); err != nil && net.ParseIP(ip) == nil {
			return fmt.Errorf("ips: %q is neither an IP address nor a CIDR", ip)
		}
	}
	if s.MAC != "" {
		mac, err := net.ParseMAC(s.MAC)
		switch {
		case err != nil:
			return fmt.Errorf("mac %q: %v", s.MAC, err)
		case mac[0]&1 == 1:
			// The kernel would refuse it with a bare errno.
			return fmt.Errorf("mac %q is a multicast or broadcast address; an interface needs a unicast one, whose first byte is even", s.MAC)
		}
	}
	if len(s.DefaultRoute) > 0 {
		return fmt.Errorf(`"default-route": the pod's default route is its cluster network's; kurma does not move it (set %s to replace the cluster network)`, ClusterNetworkAnnotation)
	}
	for k, v := range s.CNIArgs {
		if _, ok := v.(string); !ok || k == "" || strings.ContainsAny(k, "=;") || strings.ContainsAny(v.(string), ";") {
			return fmt.Errorf(`"cni-args" %q: each argument must be a string, with no ';' (and no '=' in its key)`, k)
		}
	}
	return nil
}

// parseNames reads a list of network names separated by commas, for
// annotation key.
func parseNames(key, value string) ([]string, *types.Error) {
	invalid := func(format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: pod annotation %s=%q: ", key, value)+fmt.Sprintf(format, args...), "")
	}
	var out []string
	for i, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, invalid("entry %d is empty", i)
		}
		if e := utils.ValidateNetworkName(name); e != nil {
			return nil, invalid("%q is not a kurma network's name: %s", name, e.Msg)
		}
		if slices.Contains(out, name) {
			return nil, invalid("%q is listed twice", name)
		}
		out = append(out, name)
	}
	return out, nil
}
