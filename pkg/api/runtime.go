package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
)

// checkRuntimeConfig checks the capability arguments of a pod create: each
// network name and capability non-empty and printable, each value present.
// Whether a network declares a capability is kurmad's to decide.
func checkRuntimeConfig(rc map[string]map[string]json.RawMessage) *Error {
	for _, network := range sortedKeys(rc) {
		field := fmt.Sprintf("runtime_config[%q]", network)
		if strings.TrimSpace(network) == "" {
			return Errorf(CodeBadRequest, "field \"runtime_config\": empty network name")
		}
		if err := checkText(field, network, 256); err != nil {
			return err
		}
		for capability, v := range rc[network] {
			cf := fmt.Sprintf("%s[%q]", field, capability)
			if strings.TrimSpace(capability) == "" {
				return Errorf(CodeBadRequest, "field %q: empty capability name", field)
			}
			if err := checkText(cf, capability, 256); err != nil {
				return err
			}
			if len(v) == 0 || string(v) == "null" {
				return Errorf(CodeBadRequest, "field %q: no value", cf)
			}
			if err := checkCapabilityValue(cf, capability, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkCapabilityValue checks the value of the capabilities whose values
// a plugin would otherwise refuse with a bare errno (the kernel's answer
// to a multicast MAC): mac and ips. Other capabilities are the plugins'
// to read.
func checkCapabilityValue(field, capability string, v json.RawMessage) *Error {
	switch capability {
	case "mac":
		var s string
		if json.Unmarshal(v, &s) != nil {
			return Errorf(CodeBadRequest, "field %q: expected a string such as \"c2:00:00:00:00:01\"", field)
		}
		if msg := checkMAC(s); msg != "" {
			return Errorf(CodeBadRequest, "field %q: %s", field, msg)
		}
	case "ips":
		var ips []string
		if json.Unmarshal(v, &ips) != nil {
			return Errorf(CodeBadRequest, "field %q: expected a list of addresses such as [\"10.10.0.9\"]", field)
		}
		for _, ip := range ips {
			if net.ParseIP(ip) == nil {
				if _, _, err := net.ParseCIDR(ip); err != nil {
					return Errorf(CodeBadRequest, "field %q: %q is not an IP address (such as 10.10.0.9 or 10.10.0.9/16)", field, ip)
				}
			}
		}
	}
	return nil
}

// checkMAC says why s cannot be a pod interface's MAC address, "" when it
// can: an Ethernet address that is unicast (the kernel refuses a
// multicast or broadcast one) and not all zeros.
func checkMAC(s string) string {
	mac, err := net.ParseMAC(s)
	switch {
	case err != nil || len(mac) != 6:
		return fmt.Sprintf("%q is not an Ethernet address (such as c2:00:00:00:00:01)", s)
	case mac[0]&1 == 1:
		return fmt.Sprintf("%q is a multicast or broadcast address; an interface needs a unicast one, whose first byte is even (such as c2:00:00:00:00:01)", s)
	case bytes.Equal(mac, make(net.HardwareAddr, 6)):
		return fmt.Sprintf("%q is all zeros, which no interface may have", s)
	}
	return ""
}

// checkInterfaces checks a create's interface names, by network: each
// network named, each name one an interface can have (CNI's rule).
func checkInterfaces(ifs map[string]string) *Error {
	for _, network := range sortedKeys(ifs) {
		field := fmt.Sprintf("interfaces[%q]", network)
		if strings.TrimSpace(network) == "" {
			return Errorf(CodeBadRequest, "field \"interfaces\": empty network name")
		}
		if err := checkText(field, network, 256); err != nil {
			return err
		}
		name := ifs[network]
		if name == "" {
			return Errorf(CodeBadRequest, "field %q: empty interface name; leave the network out of \"interfaces\" for its containerInterface or the first free ethN", field)
		}
		if e := utils.ValidateInterfaceName(name); e != nil {
			return Errorf(CodeBadRequest, "field %q: %q: %s", field, name, e.Msg)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkRuntime checks a create's runtime side as CNI checks a runtime's
// arguments: a container ID and interface name CNI accepts, an optional
// CNI network name, an absolute netns path, a printable owner.
func checkRuntime(rt *Runtime) *Error {
	if rt == nil {
		return nil
	}
	if err := checkRuntimeIdentity("runtime.", rt.ContainerID, rt.Interface, rt.Network, true); err != nil {
		return err
	}
	if rt.Dropped != "" || !rt.DroppedAt.IsZero() {
		return Errorf(CodeBadRequest, "fields \"runtime.dropped\" and \"runtime.dropped_at\" are kurmad's answer, not a request's: leave them out")
	}
	if !filepath.IsAbs(rt.Netns) {
		return Errorf(CodeBadRequest, "field \"runtime.netns\": the absolute path of the runtime's network namespace is required (e.g. /proc/<pid>/ns/net), got %q", rt.Netns)
	}
	if err := checkText("runtime.netns", rt.Netns, 4096); err != nil {
		return err
	}
	return checkText("runtime.owner", rt.Owner, 256)
}

// checkRuntimeIdentity checks a container ID (required), an interface name
// (required when ifaceRequired) and a CNI network name (optional) by
// CNI's own rules; prefix goes before the field names in messages.
func checkRuntimeIdentity(prefix, containerID, iface, network string, ifaceRequired bool) *Error {
	if containerID == "" {
		return Errorf(CodeBadRequest, "field %q is required", prefix+"container_id")
	}
	if e := utils.ValidateContainerID(containerID); e != nil {
		return Errorf(CodeBadRequest, "field %q: %s", prefix+"container_id", e.Msg)
	}
	if iface != "" || ifaceRequired {
		if e := utils.ValidateInterfaceName(iface); e != nil {
			return Errorf(CodeBadRequest, "field %q: %s", prefix+"interface", e.Msg)
		}
	}
	if network != "" {
		if e := utils.ValidateNetworkName(network); e != nil {
			return Errorf(CodeBadRequest, "field %q: %s", prefix+"network", e.Msg)
		}
	}
	return nil
}

// runtimeRefFromQuery reads the container_id, interface and network query
// parameters (ifname, the deprecated name of interface, too); ok is false
// when none is given.
func runtimeRefFromQuery(q url.Values) (ref RuntimeRef, ok bool, aerr *Error) {
	for k := range q {
		switch k {
		case "container_id", "interface", "ifname", "network":
		default:
			return RuntimeRef{}, false, Errorf(CodeBadRequest, "unknown query parameter %q (known: container_id, interface, network)", k)
		}
	}
	var ifname *string
	if q.Has("ifname") {
		v := q.Get("ifname")
		ifname = &v
	}
	iface, aerr := deprecatedName("interface", q.Get("interface"), "ifname", ifname)
	if aerr != nil {
		return RuntimeRef{}, false, aerr
	}
	ref = RuntimeRef{ContainerID: q.Get("container_id"), Interface: iface, Network: q.Get("network")}
	if ref == (RuntimeRef{}) {
		return ref, false, nil
	}
	return ref, true, checkRuntimeIdentity("", ref.ContainerID, ref.Interface, ref.Network, false)
}

// matches reports whether a pod belongs to ref's runtime attachment.
func (ref RuntimeRef) matches(p *Pod) bool {
	rt := p.Runtime
	return rt != nil && rt.ContainerID == ref.ContainerID &&
		(ref.Interface == "" || rt.Interface == ref.Interface) && (ref.Network == "" || rt.Network == ref.Network)
}

// decodeGC decodes and validates the body of POST /v1/pods/gc.
func decodeGC(data []byte) (GCRequest, *Error) {
	var req GCRequest
	if err := decodeStrict(data, &req); err != nil {
		return GCRequest{}, err
	}
	if req.Network == "" {
		return GCRequest{}, Errorf(CodeBadRequest, "field \"network\" is required: the runtime's CNI network name")
	}
	if e := utils.ValidateNetworkName(req.Network); e != nil {
		return GCRequest{}, Errorf(CodeBadRequest, "field \"network\": %s", e.Msg)
	}
	if req.ValidAttachments == nil {
		return GCRequest{}, Errorf(CodeBadRequest, "field \"valid_attachments\" is required: the attachments the runtime still uses ([] releases every one of its pods on the network)")
	}
	if err := checkText("owner", req.Owner, 256); err != nil {
		return GCRequest{}, err
	}
	for i, a := range req.ValidAttachments {
		if err := checkRuntimeIdentity(fmt.Sprintf("valid_attachments[%d].", i), a.ContainerID, a.Interface, "", true); err != nil {
			return GCRequest{}, err
		}
	}
	return req, nil
}
