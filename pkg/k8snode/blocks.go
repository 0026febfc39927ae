package k8snode

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// Span is a Network's cluster-wide addressing (spec.scope cluster with
// spec.subnet): its subnet, of which each node gets a block of Bits.
type Span struct {
	Subnet netip.Prefix
	Bits   int
}

// ErrNoFreeBlock means every block of a Network's subnet is taken.
var ErrNoFreeBlock = errors.New("every block of spec.subnet is taken by another node")

// Span is o's cluster-wide addressing; ok is false for a Network that
// kurma does not address (spec.scope node, or cluster without a subnet).
// An error names the field at fault.
func (o *NetworkObject) Span() (sp Span, ok bool, err error) {
	s := o.Spec
	switch s.Scope {
	case "", ScopeNode:
		if s.Subnet != "" || s.BlockSize != 0 {
			return Span{}, false, fmt.Errorf("spec.subnet and spec.blockSize: only a Network of spec.scope %s has them (this one is %s)", ScopeCluster, ScopeNode)
		}
		return Span{}, false, nil
	case ScopeCluster:
	default:
		return Span{}, false, fmt.Errorf("spec.scope %q: want %s or %s", s.Scope, ScopeNode, ScopeCluster)
	}
	if s.Subnet == "" {
		if s.BlockSize != 0 {
			return Span{}, false, errors.New("spec.blockSize: only with spec.subnet")
		}
		return Span{}, false, nil // its plugin spans the nodes (an overlay)
	}
	p, err := netip.ParsePrefix(s.Subnet)
	if err != nil {
		return Span{}, false, fmt.Errorf("spec.subnet: %w", err)
	}
	if p != p.Masked() {
		return Span{}, false, fmt.Errorf("spec.subnet %s: not the first address of its range (%s?)", s.Subnet, p.Masked())
	}
	bits, most := 24, 30
	if p.Addr().Is6() {
		bits, most = 64, 126
	}
	if s.BlockSize != 0 {
		bits = s.BlockSize
	} else if bits <= p.Bits() {
		return Span{}, false, fmt.Errorf("spec.subnet %s: smaller than the default block (/%d): set spec.blockSize", s.Subnet, bits)
	}
	if bits <= p.Bits() || bits > most {
		return Span{}, false, fmt.Errorf("spec.blockSize %d: want a block smaller than spec.subnet %s, at most /%d (a gateway and pods)", bits, s.Subnet, most)
	}
	return Span{Subnet: p, Bits: bits}, true, nil
}

// Blocks is how many blocks the subnet has, at most 1<<62.
func (s Span) Blocks() uint64 {
	return 1 << min(s.Bits-s.Subnet.Bits(), 62)
}

// Block is the subnet's n-th block.
func (s Span) Block(n uint64) netip.Prefix {
	a := s.Subnet.Addr()
	v := new(big.Int).SetBytes(a.AsSlice())
	off := new(big.Int).Lsh(new(big.Int).SetUint64(n), uint(a.BitLen()-s.Bits))
	v.Add(v, off)
	buf := make([]byte, a.BitLen()/8)
	v.FillBytes(buf)
	addr, _ := netip.AddrFromSlice(buf)
	return netip.PrefixFrom(addr, s.Bits)
}

// Holds parses block and reports whether it is one of the subnet's blocks
// (inside it, of its size, aligned).
func (s Span) Holds(block string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(block)
	if err != nil || p.Bits() != s.Bits || p != p.Masked() || !s.Subnet.Contains(p.Addr()) || s.Subnet.Addr().Is4() != p.Addr().Is4() {
		return netip.Prefix{}, false
	}
	return p, true
}

// Free is the subnet's first block not in taken (blocks of other sizes or
// outside it are not counted): at most len(taken)+1 are looked at.
func (s Span) Free(taken []netip.Prefix) (netip.Prefix, error) {
	held := map[netip.Prefix]bool{}
	for _, t := range taken {
		held[t] = true
	}
	for n := uint64(0); n < s.Blocks(); n++ {
		if b := s.Block(n); !held[b] {
			return b, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w (%d blocks of /%d in %s)", ErrNoFreeBlock, s.Blocks(), s.Bits, s.Subnet)
}

// takenBlocks are the blocks of s other nodes than node hold in entries.
func takenBlocks(s Span, entries []NodeStatus, node string) []netip.Prefix {
	var out []netip.Prefix
	for _, e := range entries {
		if e.Node == node {
			continue
		}
		if b, ok := s.Holds(e.Block); ok {
			out = append(out, b)
		}
	}
	return out
}

// blockOf is node's block in entries when it is one of s's and no other
// node holds it too (a block two entries name is nobody's until one
// gives it up: it can only come from hands, not from kurma's writes).
func blockOf(s Span, entries []NodeStatus, node string) (netip.Prefix, bool) {
	var mine netip.Prefix
	found := false
	for _, e := range entries {
		if e.Node == node {
			mine, found = s.Holds(e.Block)
		}
	}
	if !found {
		return netip.Prefix{}, false
	}
	for _, e := range entries {
		if b, ok := s.Holds(e.Block); ok && e.Node != node && b == mine {
			return netip.Prefix{}, false
		}
	}
	return mine, true
}
