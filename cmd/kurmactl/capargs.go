package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/kurma-project/kurma/pkg/api"
)

// capFlags are pod create's capability flags, each value as typed:
// --publish HOST:CONTAINER[/tcp|udp|sctp], --ip, --mac and --bandwidth RATE, each
// optionally prefixed NAME: to say which of the pod's networks it is for.
type capFlags struct {
	publish, ip, mac, bandwidth []string
}

func (f *capFlags) empty() bool {
	return len(f.publish)+len(f.ip)+len(f.mac)+len(f.bandwidth) == 0
}

// runtimeConfig turns the flags into the create's runtime_config for a pod
// joining networks (in order): each value goes to the network its NAME:
// prefix names, or to the pod's one network; with several and no prefix
// it is an error saying how to write it.
func (f *capFlags) runtimeConfig(networks []string) (map[string]map[string]json.RawMessage, error) {
	out := capArgs{}
	for _, add := range []func([]string, capArgs) error{f.addPublish, f.addIPs, f.addMACs, f.addBandwidth} {
		if err := add(networks, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// capArgs is a runtime_config being built: network → capability → value.
type capArgs map[string]map[string]json.RawMessage

// set gives network's capability its value, once.
func (c capArgs) set(network, capability string, v any) error {
	if c[network] == nil {
		c[network] = map[string]json.RawMessage{}
	}
	if _, dup := c[network][capability]; dup {
		return fmt.Errorf("network %s: %s is given twice", network, capability)
	}
	b, err := json.Marshal(v)
	c[network][capability] = b
	return err
}

// portMapping is one entry of CNI's portMappings capability.
type portMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
}

// addPublish turns every --publish into its network's portMappings.
func (f *capFlags) addPublish(networks []string, out capArgs) error {
	ports := map[string][]portMapping{}
	for _, v := range f.publish {
		network, value, err := target("--publish", v, networks, "18090:80")
		if err != nil {
			return err
		}
		host, ctr, proto, err := parsePublish(value)
		if err != nil {
			return fmt.Errorf("--publish %s: %w", v, err)
		}
		ports[network] = append(ports[network], portMapping{HostPort: host, ContainerPort: ctr, Protocol: proto})
	}
	for network, list := range ports {
		if err := out.set(network, "portMappings", list); err != nil {
			return err
		}
	}
	return nil
}

// addIPs turns every --ip into its network's ips.
func (f *capFlags) addIPs(networks []string, out capArgs) error {
	ips := map[string][]string{}
	for _, v := range f.ip {
		network, value, err := target("--ip", v, networks, "10.10.0.9")
		if err != nil {
			return err
		}
		if net.ParseIP(value) == nil {
			if _, _, err := net.ParseCIDR(value); err != nil {
				return fmt.Errorf("--ip %s: %q is not an IP address (such as 10.10.0.9 or 10.10.0.9/16)", v, value)
			}
		}
		ips[network] = append(ips[network], value)
	}
	for network, list := range ips {
		if err := out.set(network, "ips", list); err != nil {
			return err
		}
	}
	return nil
}

// addMACs turns each --mac into its network's mac.
func (f *capFlags) addMACs(networks []string, out capArgs) error {
	for _, v := range f.mac {
		network, value, err := target("--mac", v, networks, "c2:00:00:00:00:01")
		if err != nil {
			return err
		}
		mac, err := net.ParseMAC(value)
		if err != nil || len(mac) != 6 {
			return fmt.Errorf("--mac %s: %q is not an Ethernet address (such as c2:00:00:00:00:01)", v, value)
		}
		if err := out.set(network, "mac", mac.String()); err != nil {
			return fmt.Errorf("--mac: %w", err)
		}
	}
	return nil
}

// addBandwidth turns each --bandwidth into its network's bandwidth, the
// same rate both ways with a burst of a tenth of it (at least minBurst).
func (f *capFlags) addBandwidth(networks []string, out capArgs) error {
	for _, v := range f.bandwidth {
		network, value, err := target("--bandwidth", v, networks, "10mbit")
		if err != nil {
			return err
		}
		rate, err := parseRate(value)
		if err != nil {
			return fmt.Errorf("--bandwidth %s: %w", v, err)
		}
		burst := max(rate/10, minBurst)
		bw := map[string]uint64{"ingressRate": rate, "ingressBurst": burst, "egressRate": rate, "egressBurst": burst}
		if err := out.set(network, "bandwidth", bw); err != nil {
			return fmt.Errorf("--bandwidth: %w", err)
		}
	}
	return nil
}

// target splits a capability flag's value into the network it is for and
// the value proper.
func target(flag, v string, networks []string, example string) (network, value string, err error) {
	if name, rest, ok := strings.Cut(v, ":"); ok && slices.Contains(networks, name) {
		return name, rest, nil
	}
	switch len(networks) {
	case 0:
		return "", "", fmt.Errorf("%s %s: the pod joins no network", flag, v)
	case 1:
		return networks[0], v, nil
	}
	return "", "", fmt.Errorf("%s %s: the pod joins several networks (%s): say which with a NAME: prefix, e.g. %s %s:%s",
		flag, v, strings.Join(networks, ", "), flag, networks[0], example)
}

// parsePublish reads HOST:CONTAINER[/tcp|udp|sctp].
func parsePublish(s string) (host, ctr int, proto string, err error) {
	ports, proto, hasProto := strings.Cut(s, "/")
	if !hasProto {
		proto = "tcp"
	}
	switch proto = strings.ToLower(proto); proto {
	case "tcp", "udp", "sctp":
	default:
		return 0, 0, "", fmt.Errorf("protocol %q: write tcp, udp or sctp", proto)
	}
	h, c, ok := strings.Cut(ports, ":")
	if !ok {
		return 0, 0, "", fmt.Errorf("write HOSTPORT:CONTAINERPORT[/tcp|udp|sctp], e.g. 18090:80")
	}
	if host, err = parsePort(h); err != nil {
		return 0, 0, "", err
	}
	if ctr, err = parsePort(c); err != nil {
		return 0, 0, "", err
	}
	return host, ctr, proto, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return n, nil
}

// minBurst is the least burst --bandwidth gives, in bits (64 KiB): a
// token bucket smaller than a few packets would throttle below its rate.
const minBurst = 64 << 10 * 8

// parseRate reads a rate in bits per second: a number with an optional
// k, m or g (decimal) and an optional "bit", as tc writes it: 500kbit,
// 10mbit, 1g, 1000000.
func parseRate(s string) (uint64, error) {
	num := strings.TrimSuffix(strings.ToLower(s), "bit")
	mult := uint64(1)
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'k':
			mult, num = 1e3, num[:n-1]
		case 'm':
			mult, num = 1e6, num[:n-1]
		case 'g':
			mult, num = 1e9, num[:n-1]
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v == 0 || v > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a rate: write bits per second such as 500kbit, 10mbit or 1gbit", s)
	}
	return v * mult, nil
}

// podNetworks is the networks a create joins: those of its --net flags,
// or kurmad's default networks when there are none.
func podNetworks(ctx context.Context, cl *api.Client, refs []string) ([]string, error) {
	var out []string
	for _, r := range refs {
		name, _, _ := strings.Cut(r, ":")
		out = append(out, name)
	}
	if len(out) > 0 {
		return out, nil
	}
	gens, err := cl.Networks(ctx)
	if err != nil {
		return nil, err
	}
	return defaultNetworks(gens), nil
}

// defaultNetworks is the names of the default networks, once each: net ls
// lists every generation, and while a new generation starts beside the
// serving one both are the network's and both show its default.
func defaultNetworks(gens []api.Generation) []string {
	var out []string
	for _, g := range gens {
		if g.Default && !slices.Contains(out, g.Network) {
			out = append(out, g.Network)
		}
	}
	return out
}
