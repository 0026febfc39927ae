package k8snode

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// TestSpan: a Network's spec.scope, subnet and blockSize read as kurma
// reads them (defaults, and each mistake named by its field); blocks
// counted and numbered from the subnet's first; the first free block is
// taken whatever blocks of other sizes say; a block two nodes name is
// neither's.
func TestSpan(t *testing.T) {
	spanOf := func(scope, subnet string, size int) (Span, bool, error) {
		return network("n", NetworkSpec{Scope: scope, Subnet: subnet, BlockSize: size}).Span()
	}
	for _, tt := range []struct {
		scope, subnet string
		size          int
		want          string // the span, "" for none
		err           string
	}{
		{"", "", 0, "", ""},
		{ScopeNode, "", 0, "", ""},
		{ScopeCluster, "", 0, "", ""},
		{ScopeCluster, "10.77.0.0/16", 0, "10.77.0.0/16/24", ""},
		{ScopeCluster, "10.77.0.0/16", 26, "10.77.0.0/16/26", ""},
		{ScopeCluster, "fd00:77::/48", 0, "fd00:77::/48/64", ""},
		{ScopeNode, "10.77.0.0/16", 0, "", "only a Network of spec.scope cluster"},
		{ScopeCluster, "10.77.1.0/16", 0, "", "not the first address of its range (10.77.0.0/16?)"},
		{ScopeCluster, "10.77.0.0/25", 0, "", "smaller than the default block (/24): set spec.blockSize"},
		{ScopeCluster, "10.77.0.0/16", 16, "", "spec.blockSize 16"},
		{ScopeCluster, "10.77.0.0/16", 31, "", "at most /30"},
		{ScopeCluster, "", 24, "", "spec.blockSize: only with spec.subnet"},
		{"everywhere", "", 0, "", `spec.scope "everywhere"`},
	} {
		sp, ok, err := spanOf(tt.scope, tt.subnet, tt.size)
		got := ""
		if ok {
			got = sp.Subnet.String() + "/" + strconv.Itoa(sp.Bits)
		}
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("scope %q subnet %q blockSize %d: %q, %v; want %q, %q", tt.scope, tt.subnet, tt.size, got, err, tt.want, tt.err)
		}
	}

	sp := Span{Subnet: netip.MustParsePrefix("10.77.0.0/22"), Bits: 24}
	if n := sp.Blocks(); n != 4 {
		t.Errorf("%d blocks of /24 in %s", n, sp.Subnet)
	}
	if b := sp.Block(3); b.String() != "10.77.3.0/24" {
		t.Errorf("block 3: %s", b)
	}
	v6 := Span{Subnet: netip.MustParsePrefix("fd00:77::/48"), Bits: 64}
	if b := v6.Block(0x102); b.String() != "fd00:77:0:102::/64" {
		t.Errorf("IPv6 block 0x102: %s", b)
	}
	taken := []netip.Prefix{netip.MustParsePrefix("10.77.0.0/24"), netip.MustParsePrefix("10.77.1.0/25"), netip.MustParsePrefix("10.77.2.0/24")}
	if b, err := sp.Free(taken); err != nil || b.String() != "10.77.1.0/24" {
		t.Errorf("free block: %s, %v; want 10.77.1.0/24 (a /25 is not a block)", b, err)
	}
	all := []netip.Prefix{sp.Block(0), sp.Block(1), sp.Block(2), sp.Block(3)}
	if _, err := sp.Free(all); !errors.Is(err, ErrNoFreeBlock) {
		t.Errorf("a full subnet: %v, want ErrNoFreeBlock", err)
	}
	for _, bad := range []string{"10.77.1.0/25", "10.77.1.5/24", "10.78.0.0/24", "fd00::/24", "x"} {
		if _, ok := sp.Holds(bad); ok {
			t.Errorf("%s counted as a block of %s /24", bad, sp.Subnet)
		}
	}
	entries := []NodeStatus{{Node: "a", Block: "10.77.0.0/24"}, {Node: "b", Block: "10.77.1.0/24"}, {Node: "c", Block: "10.77.1.0/24"}, {Node: "d"}}
	if b, ok := blockOf(sp, entries, "a"); !ok || b.String() != "10.77.0.0/24" {
		t.Errorf("a's block: %s %v", b, ok)
	}
	for _, n := range []string{"b", "c", "d", "e"} {
		if b, ok := blockOf(sp, entries, n); ok {
			t.Errorf("%s holds %s, want none (shared, or none named)", n, b)
		}
	}
	if got := takenBlocks(sp, entries, "b"); len(got) != 2 {
		t.Errorf("blocks taken from b's view: %v, want a's and c's", got)
	}
}
