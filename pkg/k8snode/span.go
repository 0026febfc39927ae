package k8snode

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A Network of spec.scope cluster with a spec.subnet spans the nodes the
// way kubenet and flannel's host-gw do: each node holds a block of the
// subnet (blocks.go), and every node routes the other nodes' blocks to
// their addresses. The network is closed to other traffic by policy
// routing on each node: a packet to the subnet is routed only when it
// comes from the subnet (a pod of the network, here or on another node)
// or from the node itself; any other, a pod of another network routed
// through the node above all, meets a prohibit rule. Both are the node's
// kernel state, not a process's: they stay while kurma restarts.

// SpanRoutes is what one spanning network needs of a node's routing: its
// subnet, and the other nodes' blocks with the addresses they are routed
// to.
type SpanRoutes struct {
	Network string
	Subnet  netip.Prefix
	Blocks  []BlockRoute
}

// BlockRoute is another node's block and its address.
type BlockRoute struct {
	Block netip.Prefix
	Via   netip.Addr
}

// Router makes a node's routing what the spanning networks need; the
// real one is KernelRouter, tests record.
type Router interface {
	// Route makes the node's routes and rules for spanning networks
	// exactly nets: what a network no longer in nets had goes.
	Route(nets []SpanRoutes) error
}

// Routing protocol and rule priorities kurma's routes and rules carry:
// how KernelRouter finds its own among the node's.
const (
	// SpanProtocol marks kurma's routes and rules (rtnetlink's protocol
	// field; `ip route show proto 107`); unassigned in
	// /etc/iproute2/rt_protos.
	SpanProtocol = 107
	// SpanRulePriority is the first of the three rules of each subnet,
	// before the main table's (32766): from the subnet to it, look up
	// main; from the node itself to it, look up main; to it, prohibit.
	SpanRulePriority = 32000
)

// frActProhibit is a rule's action prohibit (linux/fib_rules.h,
// FR_ACT_PROHIBIT; ip rule ... prohibit), in rtmsg's type.
const frActProhibit = 8

// KernelRouter is Router over the node's network namespace (kurma-node
// runs in it: hostNetwork).
type KernelRouter struct{}

// Route implements Router: each block route of nets is made or replaced
// (proto SpanProtocol, main table), each rule made, and kurma's routes and
// rules that nets does not name are removed. Every change is attempted;
// the error names each that failed.
func (KernelRouter) Route(nets []SpanRoutes) error {
	var errs []error
	wantRoutes := map[string]netlink.Route{}
	wantRules := map[string]netlink.Rule{}
	for _, n := range nets {
		for _, b := range n.Blocks {
			r := netlink.Route{Dst: ipNet(b.Block), Gw: b.Via.AsSlice(), Protocol: SpanProtocol, Table: unix.RT_TABLE_MAIN}
			wantRoutes[b.Block.String()] = r
		}
		for _, r := range spanRules(n.Subnet) {
			wantRules[ruleKey(r)] = r
		}
	}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		have, err := netlink.RouteListFiltered(family, &netlink.Route{Protocol: SpanProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing kurma's routes: %w", err))
			continue
		}
		for _, r := range have {
			w, ok := wantRoutes[r.Dst.String()]
			if ok && w.Gw.Equal(r.Gw) {
				delete(wantRoutes, r.Dst.String())
				continue
			}
			if !ok {
				if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("removing the route to %s via %s: %w", r.Dst, r.Gw, err))
				}
			}
		}
		rules, err := netlink.RuleList(family)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing kurma's rules: %w", err))
			continue
		}
		for _, r := range rules {
			if r.Protocol != SpanProtocol {
				continue
			}
			if _, ok := wantRules[ruleKey(r)]; ok {
				delete(wantRules, ruleKey(r))
				continue
			}
			r := r
			if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing the rule %s: %w", ruleKey(r), err))
			}
		}
	}
	for _, k := range sortedKeysOf(wantRoutes) {
		r := wantRoutes[k]
		if err := netlink.RouteReplace(&r); err != nil {
			errs = append(errs, fmt.Errorf("routing %s via %s: %w", r.Dst, r.Gw, err))
		}
	}
	for _, k := range sortedKeysOf(wantRules) {
		r := wantRules[k]
		if err := netlink.RuleAdd(&r); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("adding the rule %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// spanRules are subnet's three rules: packets from the subnet to it, and
// from the node itself (iif lo: locally made), look up the main table;
// any other packet to it is prohibited.
func spanRules(subnet netip.Prefix) []netlink.Rule {
	family := netlink.FAMILY_V4
	if subnet.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	mk := func(prio int) netlink.Rule {
		r := *netlink.NewRule()
		r.Family, r.Priority, r.Protocol, r.Dst = family, prio, SpanProtocol, ipNet(subnet)
		return r
	}
	fromSubnet := mk(SpanRulePriority)
	fromSubnet.Src, fromSubnet.Table = ipNet(subnet), unix.RT_TABLE_MAIN
	fromNode := mk(SpanRulePriority + 1)
	fromNode.IifName, fromNode.Table = "lo", unix.RT_TABLE_MAIN
	others := mk(SpanRulePriority + 2)
	others.Type = frActProhibit
	return []netlink.Rule{fromSubnet, fromNode, others}
}

// ruleKey is what tells kurma's rules apart: priority, selectors and
// action, as `ip rule` shows them.
func ruleKey(r netlink.Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:", r.Priority)
	if r.Src != nil {
		fmt.Fprintf(&b, " from %s", r.Src)
	}
	if r.IifName != "" {
		fmt.Fprintf(&b, " iif %s", r.IifName)
	}
	if r.Dst != nil {
		fmt.Fprintf(&b, " to %s", r.Dst)
	}
	if r.Type == frActProhibit {
		b.WriteString(" prohibit")
	} else {
		fmt.Fprintf(&b, " lookup %d", r.Table)
	}
	return b.String()
}

func ipNet(p netip.Prefix) *net.IPNet {
	p = p.Masked()
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// spanRoutesEqual reports whether a and b route the same.
func spanRoutesEqual(a, b []SpanRoutes) bool {
	return slices.EqualFunc(a, b, func(x, y SpanRoutes) bool {
		return x.Network == y.Network && x.Subnet == y.Subnet && slices.Equal(x.Blocks, y.Blocks)
	})
}
