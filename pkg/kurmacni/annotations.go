package kurmacni

import (
	"encoding/json"
	"fmt"
	"net"
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
)

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
}

// podNetworks is what ADD attaches, in order: the cluster network (the
// conflist's "network", or the pod's ClusterNetworkAnnotation), then the
// networks of its NetworksAnnotation not already among them, when the
// runtime passed the pod's annotations. A malformed annotation is CNI
// code 7 naming it and the element at fault; networks it names that
// kurmad does not have fail in kurmad before anything is attached (400
// unknown_network, also code 7).
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
	if value, ok := annotations[ClusterNetworkAnnotation]; ok {
		names, e := parseNames(ClusterNetworkAnnotation, value)
		if e != nil {
			return nil, e
		}
		sel.networks = names
	}
	value, ok := annotations[NetworksAnnotation]
	if !ok {
		return sel, nil
	}
	selections, e := parseNetworksAnnotation(value)
	if e != nil {
		return nil, e
	}
	return sel, sel.add(selections, ifname, value)
}

// podSelection is the networks a pod joins and what it asked of each.
type podSelection struct {
	networks []string
	// interfaces, runtimeConfig and args are per network name.
	interfaces    map[string]string
	runtimeConfig map[string]map[string]json.RawMessage
	args          map[string][]string // "K=V"
}

// add appends the annotation's selections after the cluster networks:
// one naming a cluster network is that network (it may ask nothing of
// it), the others get their interface or net1, net2, ... in order.
func (s *podSelection) add(selections []Selection, ifname, value string) *types.Error {
	invalid := func(i int, format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: pod annotation %s=%q: element %d (%q): ", NetworksAnnotation, value, i, selections[i].Name)+fmt.Sprintf(format, args...), "")
	}
	taken := map[string]bool{ifname: true}
	for _, sl := range selections {
		if sl.Interface != "" {
			taken[sl.Interface] = true
		}
	}
	n := 1
	for i, sl := range selections {
		if slices.Contains(s.networks, sl.Name) {
			if sl.Interface != "" || len(sl.IPs) > 0 || sl.MAC != "" || len(sl.CNIArgs) > 0 {
				return invalid(i, "it is the pod's cluster network (%s), whose attachment the runtime's conflist sets; ask for interfaces, IPs, a MAC or arguments of the networks added to it", ifname)
			}
			continue
		}
		s.networks = append(s.networks, sl.Name)
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
		s.interfaces[sl.Name] = name
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
			s.runtimeConfig[sl.Name] = rc
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
			s.args[sl.Name] = append(s.args[sl.Name], k+"="+sl.CNIArgs[k].(string))
		}
	}
	return nil
}

// parseNetworksAnnotation reads NetworksAnnotation's value: multus' JSON
// form (a list of Selection) when it starts with '[', else names
// separated by commas, blanks around them ignored, each "name" or
// "name@interface". Every element is checked, none twice.
func parseNetworksAnnotation(value string) ([]Selection, *types.Error) {
	invalid := func(format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: pod annotation %s=%q: ", NetworksAnnotation, value)+fmt.Sprintf(format, args...), "")
	}
	trimmed := strings.TrimSpace(value)
	if trimmed == "" {
		return nil, invalid(`names no network; list kurma networks separated by commas, e.g. "webnet,mynet", or remove the annotation`)
	}
	var out []Selection
	if strings.HasPrefix(trimmed, "[") {
		dec := json.NewDecoder(strings.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out); err != nil {
			return nil, invalid("not a JSON list of network selections (name, interface, ips, mac, cni-args): %v", err)
		}
		if len(out) == 0 {
			return nil, invalid("names no network")
		}
	} else {
		for i, entry := range strings.Split(value, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				return nil, invalid("entry %d is empty", i)
			}
			name, ifname, _ := strings.Cut(entry, "@")
			out = append(out, Selection{Name: name, Interface: ifname})
		}
	}
	var names, ifnames []string
	for i, s := range out {
		at := func(format string, args ...any) *types.Error {
			return invalid("element %d (%q): %s", i, s.Name, fmt.Sprintf(format, args...))
		}
		if s.Name == "" {
			return nil, invalid("element %d has no network name", i)
		}
		if e := utils.ValidateNetworkName(s.Name); e != nil {
			return nil, at("not a kurma network's name: %s", e.Msg)
		}
		if slices.Contains(names, s.Name) {
			return nil, at("the network is listed twice")
		}
		names = append(names, s.Name)
		if s.Namespace != "" {
			return nil, at(`"namespace" %q: kurma networks are cluster-wide (kubectl get networks.kurma.dev); drop it`, s.Namespace)
		}
		if s.Interface != "" {
			if e := utils.ValidateInterfaceName(s.Interface); e != nil {
				return nil, at("interface %q: %s", s.Interface, e.Msg)
			}
			if slices.Contains(ifnames, s.Interface) {
				return nil, at("interface %q is asked for twice", s.Interface)
			}
			ifnames = append(ifnames, s.Interface)
		}
		for _, ip := range s.IPs {
			if _, _, err := net.ParseCIDR(ip); err != nil && net.ParseIP(ip) == nil {
				return nil, at("ips: %q is neither an IP address nor a CIDR", ip)
			}
		}
		if s.MAC != "" {
			mac, err := net.ParseMAC(s.MAC)
			switch {
			case err != nil:
				return nil, at("mac %q: %v", s.MAC, err)
			case mac[0]&1 == 1:
				// The kernel would refuse it with a bare errno.
				return nil, at("mac %q is a multicast or broadcast address; an interface needs a unicast one, whose first byte is even", s.MAC)
			}
		}
		if len(s.DefaultRoute) > 0 {
			return nil, at(`"default-route": the pod's default route is its cluster network's; kurma does not move it (set %s to replace the cluster network)`, ClusterNetworkAnnotation)
		}
		for k, v := range s.CNIArgs {
			if _, ok := v.(string); !ok || k == "" || strings.ContainsAny(k, "=;") || strings.ContainsAny(v.(string), ";") {
				return nil, at(`"cni-args" %q: each argument must be a string, with no ';' (and no '=' in its key)`, k)
			}
		}
	}
	return out, nil
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
