package main

import (
	"bytes"
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

// capFlag is one capability flag: its values, how one is read, and an
// example of one.
type capFlag struct {
	name    string
	values  []string
	parse   func(string) (any, error)
	example string
}

func (f *capFlags) flags() []capFlag {
	return []capFlag{
		{"--publish", f.publish, func(s string) (any, error) { return parsePublish(s) }, "18090:80"},
		{"--ip", f.ip, parseIP, "10.10.0.9"},
		{"--mac", f.mac, parseMAC, "c2:00:00:00:00:01"},
		{"--bandwidth", f.bandwidth, parseBandwidth, "10mbit"},
	}
}

// check reads every value as written, before kurmad is asked which
// networks the pod joins: a value that cannot be read, with or without a
// NAME: prefix, is refused at once.
func (f *capFlags) check() error {
	for _, fl := range f.flags() {
		for _, v := range fl.values {
			if _, _, err := fl.split(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// split reads v: its value, and the network its NAME: prefix names (""
// for none). A prefix is only taken for one when v does not read whole
// (an IPv6 address has colons too).
func (fl capFlag) split(v string) (prefix string, value any, err error) {
	value, err = fl.parse(v)
	if err == nil {
		return "", value, nil
	}
	if name, rest, ok := strings.Cut(v, ":"); ok && name != "" {
		if value, rerr := fl.parse(rest); rerr == nil {
			return name, value, nil
		}
	}
	return "", nil, fmt.Errorf("%s %s: %w", fl.name, v, err)
}

// runtimeConfig turns the flags into the create's runtime_config for a pod
// joining networks (in order): each value goes to the network its NAME:
// prefix names, or to the pod's one network; with several and no prefix
// it is an error saying how to write it.
func (f *capFlags) runtimeConfig(networks []string) (map[string]map[string]json.RawMessage, error) {
	out := capArgs{}
	for _, fl := range f.flags() {
		byNet := map[string][]any{}
		var order []string
		for _, v := range fl.values {
			network, value, err := fl.target(v, networks)
			if err != nil {
				return nil, err
			}
			if byNet[network] == nil {
				order = append(order, network)
			}
			byNet[network] = append(byNet[network], value)
		}
		for _, network := range order {
			if err := fl.set(out, network, byNet[network]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// set gives network the capability of fl with its values: portMappings
// and ips are lists; mac and bandwidth take one value.
func (fl capFlag) set(out capArgs, network string, values []any) error {
	switch fl.name {
	case "--publish":
		return out.set(network, "portMappings", values)
	case "--ip":
		return out.set(network, "ips", values)
	}
	capability := strings.TrimPrefix(fl.name, "--")
	if len(values) > 1 {
		return fmt.Errorf("%s: network %s: %s is given twice", fl.name, network, capability)
	}
	return out.set(network, capability, values[0])
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

func parseIP(s string) (any, error) {
	if net.ParseIP(s) == nil {
		if _, _, err := net.ParseCIDR(s); err != nil {
			return nil, fmt.Errorf("%q is not an IP address (such as 10.10.0.9 or 10.10.0.9/16)", s)
		}
	}
	return s, nil
}

// parseMAC reads a MAC an interface can take: unicast (the kernel
// refuses a multicast or broadcast one), not all zeros.
func parseMAC(s string) (any, error) {
	mac, err := net.ParseMAC(s)
	switch {
	case err != nil || len(mac) != 6:
		return nil, fmt.Errorf("%q is not an Ethernet address (such as c2:00:00:00:00:01)", s)
	case mac[0]&1 == 1:
		return nil, fmt.Errorf("%q is a multicast or broadcast address; an interface needs a unicast one, whose first byte is even (such as c2:00:00:00:00:01)", s)
	case bytes.Equal(mac, make(net.HardwareAddr, 6)):
		return nil, fmt.Errorf("%q is all zeros, which no interface may have", s)
	}
	return mac.String(), nil
}

// parseBandwidth reads a rate into bandwidth's value: the same rate both
// ways with a burst of a tenth of it (at least minBurst).
func parseBandwidth(s string) (any, error) {
	rate, err := parseRate(s)
	if err != nil {
		return nil, err
	}
	burst := max(rate/10, minBurst)
	return map[string]uint64{"ingressRate": rate, "ingressBurst": burst, "egressRate": rate, "egressBurst": burst}, nil
}

// target is the network v is for and its value: the one its NAME: prefix
// names, or the pod's one network.
func (fl capFlag) target(v string, networks []string) (network string, value any, err error) {
	if name, rest, ok := strings.Cut(v, ":"); ok && slices.Contains(networks, name) {
		if value, err := fl.parse(rest); err == nil {
			return name, value, nil
		}
	}
	prefix, value, err := fl.split(v)
	if err != nil {
		return "", nil, err
	}
	if prefix != "" {
		joins := strings.Join(networks, ", ")
		if joins == "" {
			joins = "none"
		}
		return "", nil, fmt.Errorf("%s %s: the pod does not join network %q (it joins: %s)", fl.name, v, prefix, joins)
	}
	switch len(networks) {
	case 0:
		return "", nil, fmt.Errorf("%s %s: the pod joins no network", fl.name, v)
	case 1:
		return networks[0], value, nil
	}
	return "", nil, fmt.Errorf("%s %s: the pod joins several networks (%s): say which with a NAME: prefix, e.g. %s %s:%s",
		fl.name, v, strings.Join(networks, ", "), fl.name, networks[0], fl.example)
}

// parsePublish reads HOST:CONTAINER[/tcp|udp|sctp].
func parsePublish(s string) (portMapping, error) {
	ports, proto, hasProto := strings.Cut(s, "/")
	if !hasProto {
		proto = "tcp"
	}
	switch proto = strings.ToLower(proto); proto {
	case "tcp", "udp", "sctp":
	default:
		return portMapping{}, fmt.Errorf("protocol %q: write tcp, udp or sctp", proto)
	}
	h, c, ok := strings.Cut(ports, ":")
	if !ok {
		return portMapping{}, fmt.Errorf("write HOSTPORT:CONTAINERPORT[/tcp|udp|sctp], e.g. 18090:80")
	}
	host, err := parsePort(h)
	if err != nil {
		return portMapping{}, err
	}
	ctr, err := parsePort(c)
	if err != nil {
		return portMapping{}, err
	}
	return portMapping{HostPort: host, ContainerPort: ctr, Protocol: proto}, nil
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
