package k8snode

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// PodCIDRPlaceholder stands, in the kurmad config template, for the
// node's pod CIDR: the Node's spec.podCIDR, which the controller-manager
// allocates (--allocate-node-cidrs) or the cluster's installer sets.
const PodCIDRPlaceholder = "__NODE_POD_CIDR__"

// ErrNoPodCIDR means the Node has no spec.podCIDR yet.
var ErrNoPodCIDR = errors.New("the node has no pod CIDR (spec.podCIDR) yet")

// ErrNoNodeIP means the Node has no InternalIP address yet.
var ErrNoNodeIP = errors.New("the node has no InternalIP address (status.addresses) yet")

// ErrNoClusterCIDR means the template names the cluster CIDR and
// kurma-node was given none (--cluster-cidrs).
var ErrNoClusterCIDR = errors.New("no cluster CIDR given (kurma-node run --cluster-cidrs)")

// ErrNoBlock means a Network's config names this node's block of its
// subnet, and the node has none yet (it is taking one).
var ErrNoBlock = errors.New("this node has no block of the Network's spec.subnet yet")

// ErrNotSpanned means a config names a Network's subnet or block, and is
// not the config of a Network of spec.scope cluster with a spec.subnet.
var ErrNotSpanned = errors.New("only a Network of spec.scope cluster with a spec.subnet has a subnet and blocks")

// Input is what a template is rendered from on one node.
type Input struct {
	Node *NodeObject
	// ClusterCIDRs are the cluster's pod CIDRs (kube-controller-manager's
	// --cluster-cidr), at most one per family; kurma-node run's
	// --cluster-cidrs.
	ClusterCIDRs []string
	// InterfaceOf names the node's interface holding an address; nil →
	// HostInterfaceOf.
	InterfaceOf func(netip.Addr) (string, error)
	// Span and Block are, for a Network's config, its cluster-wide
	// addressing and this node's block of it (nil, invalid: none).
	Span  *Span
	Block netip.Prefix
}

// Placeholder is one name a kurmad config template may hold, replaced by
// kurma-node on each node before kurmad reads it.
type Placeholder struct {
	Name string
	// Doc says what it stands for (docs/runtimes.md lists them all).
	Doc   string
	value func(in Input) (string, error)
}

// placeholders are every name Render replaces (Placeholders returns them). A template may hold any of
// them any number of times, inside JSON strings; a list is written
// comma-separated ("10.244.1.0/24,fd00:10:244:1::/64"). One whose value
// the node does not have yet (no pod CIDR, no InternalIP) makes Render
// fail, and kurma-node wait.
var placeholders = []Placeholder{
	{"__NODE_NAME__", "the node's name (the pod's spec.nodeName)", func(in Input) (string, error) {
		return in.Node.Metadata.Name, nil
	}},
	{PodCIDRPlaceholder, "the node's pod CIDR: spec.podCIDR (the first of spec.podCIDRs)", podCIDR},
	{"__NODE_POD_CIDRS__", "all the node's pod CIDRs, comma-separated: spec.podCIDRs (one per family on a dual-stack cluster)", podCIDRs},
	{"__CLUSTER_CIDR__", "the first cluster CIDR given to kurma-node (--cluster-cidrs) of a family the node has a pod CIDR in", func(in Input) (string, error) {
		cidrs, err := clusterCIDRs(in)
		if err != nil {
			return "", err
		}
		return cidrs[0], nil
	}},
	{"__CLUSTER_CIDRS__", "the cluster CIDRs given to kurma-node (--cluster-cidrs) of the families the node has pod CIDRs in, comma-separated", func(in Input) (string, error) {
		cidrs, err := clusterCIDRs(in)
		return strings.Join(cidrs, ","), err
	}},
	{"__NODE_IP__", "the node's first InternalIP address (status.addresses)", func(in Input) (string, error) {
		ips, err := nodeIPs(in.Node)
		if err != nil {
			return "", err
		}
		return ips[0].String(), nil
	}},
	{"__NODE_IPS__", "all the node's InternalIP addresses, comma-separated", func(in Input) (string, error) {
		ips, err := nodeIPs(in.Node)
		s := make([]string, len(ips))
		for i, ip := range ips {
			s[i] = ip.String()
		}
		return strings.Join(s, ","), err
	}},
	{"__NODE_BLOCK__", "in a Network of spec.scope cluster with a spec.subnet: the node's block of it (its status.nodes entry's block)", func(in Input) (string, error) {
		if in.Span == nil {
			return "", ErrNotSpanned
		}
		if !in.Block.IsValid() {
			return "", ErrNoBlock
		}
		return in.Block.String(), nil
	}},
	{"__NETWORK_SUBNET__", "in a Network of spec.scope cluster with a spec.subnet: its spec.subnet", func(in Input) (string, error) {
		if in.Span == nil {
			return "", ErrNotSpanned
		}
		return in.Span.Subnet.String(), nil
	}},
	{"__NODE_INTERFACE__", "the name of the node's interface holding its first InternalIP (kurma runs in the node's network namespace)", func(in Input) (string, error) {
		ips, err := nodeIPs(in.Node)
		if err != nil {
			return "", err
		}
		of := in.InterfaceOf
		if of == nil {
			of = HostInterfaceOf
		}
		return of(ips[0])
	}},
}

// Placeholders returns every name Render replaces: a copy of the one
// list.
func Placeholders() []Placeholder { return slices.Clone(placeholders) }

// Render is the kurmad config for a node: the template with every
// Placeholder replaced. A template without placeholders is used as it is.
func Render(template []byte, in Input) ([]byte, error) {
	out := template
	for _, p := range placeholders {
		if !bytes.Contains(out, []byte(p.Name)) {
			continue
		}
		v, err := p.value(in)
		if err != nil {
			return nil, fmt.Errorf("node %q: %s: %w", in.Node.Metadata.Name, p.Name, err)
		}
		out = bytes.ReplaceAll(out, []byte(p.Name), []byte(v))
	}
	return out, nil
}

func podCIDR(in Input) (string, error) {
	cidr := in.Node.Spec.PodCIDR
	if cidr == "" {
		return "", ErrNoPodCIDR
	}
	if _, err := netip.ParsePrefix(cidr); err != nil {
		return "", fmt.Errorf("spec.podCIDR %q: %w", cidr, err)
	}
	return cidr, nil
}

func podCIDRs(in Input) (string, error) {
	cidrs := in.Node.Spec.PodCIDRs
	if len(cidrs) == 0 {
		first, err := podCIDR(in)
		return first, err
	}
	for i, c := range cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return "", fmt.Errorf("spec.podCIDRs[%d] %q: %w", i, c, err)
		}
	}
	return strings.Join(cidrs, ","), nil
}

// clusterCIDRs are in's cluster CIDRs, checked (at least one, each a
// CIDR, at most one per family), of the families the node has pod CIDRs
// in: one manifest naming an IPv4 and an IPv6 cluster CIDR serves
// single-stack and dual-stack clusters alike, and an overlay is never
// asked to route a family its node has no addresses for.
func clusterCIDRs(in Input) ([]string, error) {
	if len(in.ClusterCIDRs) == 0 {
		return nil, ErrNoClusterCIDR
	}
	if err := CheckClusterCIDRs(in.ClusterCIDRs); err != nil {
		return nil, err
	}
	pod, err := podCIDRs(in)
	if err != nil {
		return nil, err
	}
	var v4, v6 bool
	for _, c := range strings.Split(pod, ",") {
		p, _ := netip.ParsePrefix(c)
		v4, v6 = v4 || p.Addr().Is4(), v6 || !p.Addr().Is4()
	}
	var out []string
	for _, c := range in.ClusterCIDRs {
		if p, _ := netip.ParsePrefix(c); (p.Addr().Is4() && v4) || (!p.Addr().Is4() && v6) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: none of %q is of the family of the node's pod CIDRs %s", ErrNoClusterCIDR, in.ClusterCIDRs, pod)
	}
	return out, nil
}

// CheckClusterCIDRs checks a --cluster-cidrs list: CIDRs, at most one
// IPv4 and one IPv6.
func CheckClusterCIDRs(cidrs []string) error {
	var v4, v6 int
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("cluster CIDR %q: %w", c, err)
		}
		if p.Addr().Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		return fmt.Errorf("cluster CIDRs %q: at most one IPv4 and one IPv6", cidrs)
	}
	return nil
}

// nodeIPs are the node's InternalIP addresses.
func nodeIPs(n *NodeObject) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != "InternalIP" {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			return nil, fmt.Errorf("status.addresses: InternalIP %q: %w", a.Address, err)
		}
		out = append(out, ip)
	}
	if len(out) == 0 {
		return nil, ErrNoNodeIP
	}
	return out, nil
}

// HostInterfaceOf names the interface of this network namespace that holds
// ip.
func HostInterfaceOf(ip netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if got, ok := netip.AddrFromSlice(n.IP); ok && got.Unmap() == ip.Unmap() {
					return i.Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no interface of this node holds its InternalIP %s", ip)
}
