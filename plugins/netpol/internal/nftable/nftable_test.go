package nftable

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	nfqueue "github.com/florianl/go-nfqueue"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

const testQueue = 100

// refused is how long a connection that must not open is given: its SYN
// is dropped, so the dial fails only at this limit.
const refused = 700 * time.Millisecond

// TestDataplane installs the table through the compat path (the xtables
// NFQUEUE target) in a node namespace of the test's own and sends real
// connections through it, bridged and routed, with the test's queue
// listener giving the verdicts.
func TestDataplane(t *testing.T) {
	requireRoot(t)
	l := newLab(t)
	a, b, c := l.pods["a"], l.pods["b"], l.pods["c"]
	for _, p := range []*labPod{a, b, c} {
		l.serve(t, p)
	}
	native, err := QueueExprSupported(int(l.node))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel has nft's queue expression: %v; testing the xtables NFQUEUE target", native)

	tb, err := Install(Options{Name: TableName("lab"), Queue: testQueue, NetNS: int(l.node)}, []netip.Addr{b.v4, b.v6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Remove() })
	ruleset := nftIn(t, l.node, "list", "table", "inet", tb.Name())
	for _, want := range []string{"hook postrouting priority srcnat - 5", "meta skuid 0 accept",
		"ct state established,related accept",
		// How nft 1.0 shows the xtables NFQUEUE target (translated by libxtables).
		"managed by iptables-nft", "queue num 100", "ip daddr @pods-v4", "ip6 saddr @pods-v6",
		b.v4.String(), b.v6.String()} {
		if !strings.Contains(ruleset, want) {
			t.Errorf("nft list table inet %s has no %q:\n%s", tb.Name(), want, ruleset)
		}
	}
	t.Logf("%s", ruleset)

	ls := l.listen(t, testQueue)

	// a → b, bridged, b in the set: the first packet only is queued; the
	// flow, once accepted, never again.
	ab, err := l.dial(a, b.v4, 5*time.Second)
	if err != nil {
		t.Fatalf("a → b with an accepting verdict: %v", err)
	}
	defer ab.Close()
	if err := echo(ab, 5); err != nil {
		t.Fatalf("a → b: %v", err)
	}
	wantQueued(t, "a → b (b in the set), 5 round trips", ls.take(), queued{a.v4, b.v4, true})

	// The same over IPv6 (its own set and rules; neighbour discovery passes).
	ab6, err := l.dial(a, b.v6, 5*time.Second)
	if err != nil {
		t.Fatalf("a → b over IPv6: %v", err)
	}
	if err := echo(ab6, 2); err != nil {
		t.Fatalf("a → b over IPv6: %v", err)
	}
	ab6.Close()
	wantQueued(t, "a → b over IPv6", ls.take(), queued{a.v6, b.v6, true})

	// a → c, routed, neither in the set: never queued.
	ac, err := l.dial(a, c.v4, 5*time.Second)
	if err != nil {
		t.Fatalf("a → c: %v", err)
	}
	if err := echo(ac, 3); err != nil {
		t.Fatalf("a → c: %v", err)
	}
	ac.Close()
	wantQueued(t, "a → c (neither in the set)", ls.take())

	// Dropping: c → b (routed, to a set member) does not open; the flow
	// a → b, established before, goes on without a verdict.
	ls.setVerdict(nfqueue.NfDrop)
	if conn, err := l.dial(c, b.v4, refused); err == nil {
		conn.Close()
		t.Fatal("c → b opened with a dropping verdict")
	}
	if got := ls.take(); len(got) == 0 || !slices.ContainsFunc(got, func(q queued) bool { return q == (queued{c.v4, b.v4, true}) }) {
		t.Fatalf("c → b: queued %v, want its SYNs", got)
	}
	if err := echo(ab, 3); err != nil {
		t.Fatalf("established a → b under a dropping verdict: %v", err)
	}
	wantQueued(t, "established a → b under a dropping verdict", ls.take())

	// The sets change: b leaves, c joins; the next new connection sees it.
	if err := tb.SetAddresses([]netip.Addr{c.v4}); err != nil {
		t.Fatal(err)
	}
	ab2, err := l.dial(a, b.v4, 5*time.Second)
	if err != nil {
		t.Fatalf("a → b once b left the set: %v", err)
	}
	ab2.Close()
	wantQueued(t, "a → b once b left the set", ls.take())
	if conn, err := l.dial(a, c.v4, refused); err == nil {
		conn.Close()
		t.Fatal("a → c opened once c joined the set, with a dropping verdict")
	}
	if got := ls.take(); !slices.Contains(got, queued{a.v4, c.v4, true}) {
		t.Fatalf("a → c once c joined the set: queued %v", got)
	}

	// Nobody on the queue, fail-closed: dropped by the kernel.
	ls.close()
	if conn, err := l.dial(a, c.v4, refused); err == nil {
		conn.Close()
		t.Fatal("a → c opened with nobody on the queue, fail-closed")
	}
	// Fail-open: the queue's bypass lets it through.
	if err := tb.Remove(); err != nil {
		t.Fatal(err)
	}
	open, err := Install(Options{Name: TableName("lab"), Queue: testQueue, NetNS: int(l.node), FailOpen: true}, []netip.Addr{c.v4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Remove() })
	if open.Persistent() {
		t.Error("a fail-open table is persistent: a crash would leave it")
	}
	conn, err := l.dial(a, c.v4, 5*time.Second)
	if err != nil {
		t.Fatalf("a → c with nobody on the queue, fail-open: %v", err)
	}
	conn.Close()
	if err := open.Remove(); err != nil {
		t.Fatal(err)
	}
	if out := nftIn(t, l.node, "list", "tables"); strings.Contains(out, Prefix) {
		t.Fatalf("tables left after Remove:\n%s", out)
	}
}

func wantQueued(t *testing.T, what string, got []queued, want ...queued) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: queued %v, want %v", what, got, want)
	}
}

// TestOwnership checks what the owner flag buys: nobody else changes a live
// daemon's table (neither kube-network-policies' own sync under the same
// name nor a cleanup), a fail-closed table outlives its daemon's socket
// until RemoveOrphans, and the queue probe leaves nothing.
func TestOwnership(t *testing.T) {
	requireRoot(t)
	node := newNetns(t)
	native, err := QueueExprSupported(int(node))
	if err != nil {
		t.Fatal(err)
	}
	if out := nftIn(t, node, "list", "tables"); out != "" {
		t.Fatalf("the queue probe (native=%v) left tables:\n%s", native, out)
	}
	name := TableName("own")
	tb, err := Install(Options{Name: name, Queue: testQueue, NetNS: int(node)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Remove() })
	if !tb.Persistent() {
		t.Log("this kernel has no NFT_TABLE_F_PERSIST: a crash fails open")
	}

	other, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	// As the library's sync does, under the name it was given.
	libTable := other.AddTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	other.DelTable(libTable)
	if err := other.Flush(); !errors.Is(err, unix.EPERM) {
		t.Fatalf("another socket's add and delete of the daemon's table: %v, want EPERM", err)
	}
	if removed, err := RemoveOrphans(int(node), "own"); err != nil || len(removed) != 0 {
		t.Fatalf("RemoveOrphans with the daemon alive: removed %v, %v", removed, err)
	}
	if err := tb.SetAddresses([]netip.Addr{netip.MustParseAddr("10.0.0.1")}); err != nil {
		t.Fatalf("the owner's own update: %v", err)
	}

	// The daemon dies: its socket closes without a delete.
	tb.conn.CloseLasting()
	out := nftIn(t, node, "list", "tables")
	if tb.Persistent() != strings.Contains(out, name) {
		t.Fatalf("after the owner's socket closed (persistent=%v), tables:\n%s", tb.Persistent(), out)
	}
	removed, err := RemoveOrphans(int(node), "own")
	if err != nil {
		t.Fatal(err)
	}
	if tb.Persistent() && !slices.Equal(removed, []string{name}) {
		t.Fatalf("RemoveOrphans removed %v, want [%s]", removed, name)
	}
	if out := nftIn(t, node, "list", "tables"); out != "" {
		t.Fatalf("tables left after RemoveOrphans:\n%s", out)
	}
}

func TestOfNetwork(t *testing.T) {
	for _, tt := range []struct {
		table, network string
		want           bool
	}{
		{TableName("net"), "net", true},
		{TableName("net-x"), "net", false},
		{TableName("net"), "net-x", false},
		{"kurma-netpol-net-probe", "net", false},
		{"kurma-netpol-net-0123456", "net", false},
		{"kurma-netpol-net-0123456z", "net", false},
	} {
		if got := ofNetwork(tt.table, tt.network); got != tt.want {
			t.Errorf("ofNetwork(%q, %q) = %v", tt.table, tt.network, got)
		}
	}
}
