// Package nftable is kurma-netpol's dataplane: one nftables table that
// sends the first packet of every new connection to or from a policed
// local pod to an nfqueue, where kube-network-policies' engine gives the
// verdict. It does what the library's own table does (hook postrouting
// before source NAT, accept ICMPv6, the host's root-owned sockets and
// established flows, queue the rest when a set of pod addresses matches),
// with two differences:
//
//   - The queue verdict is nft's queue expression where the kernel has it
//     (CONFIG_NFT_QUEUE), else the xtables NFQUEUE target through
//     nft_compat, which kernels without nft queue often still have.
//   - The table is owned by the daemon's netlink socket
//     (NFT_TABLE_F_OWNER): nobody else can change or delete it, and the
//     kernel acts when the daemon dies. Fail-closed (the default), it is
//     also persistent (NFT_TABLE_F_PERSIST): it stays, orphaned, when the
//     daemon dies, so selected pods' new connections are dropped until a
//     daemon of the same network starts again and removes it
//     (RemoveOrphans). Fail-open, it goes with the daemon.
package nftable

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Table flags of the kernel's uapi (nf_tables.h), not in x/sys.
const (
	tableFlagOwner   = 0x2 // NFT_TABLE_F_OWNER
	tableFlagPersist = 0x4 // NFT_TABLE_F_PERSIST (Linux 6.9)
)

// Names of the table's objects.
const (
	chainName = "postrouting"
	setV4     = "pods-v4"
	setV6     = "pods-v6"
	// Prefix starts every table name (TableName).
	Prefix = "kurma-netpol-"
)

// Options say what table Install makes.
type Options struct {
	// Name is the table's name (TableName); it must be free.
	Name string
	// Queue is the nfqueue number new packets go to.
	Queue uint16
	// FailOpen: a packet passes when no process listens on the queue
	// (the queue's bypass flag), and the table goes with the daemon.
	FailOpen bool
	// QueueAll queues every new packet rather than those of the set's
	// addresses (AdminNetworkPolicy and BaselineAdminNetworkPolicy apply to
	// every pod, as in the library).
	QueueAll bool
	// Native uses nft's queue expression; otherwise the xtables NFQUEUE
	// target (QueueExprSupported says which the kernel has).
	Native bool
	// NetNS is the network namespace (an fd) the table is made in; 0 is
	// the current one.
	NetNS int
}

// TableName is a fresh table name for a daemon of the network named
// network: unique to the daemon, so a daemon of a new generation never
// meets the table of the one it replaces.
func TableName(network string) string {
	b := make([]byte, idBytes)
	_, _ = rand.Read(b)
	return TablePrefix(network) + hex.EncodeToString(b)
}

// idBytes is the size of the random part of a table's name.
const idBytes = 4

// TablePrefix starts the name of every table of network's daemons.
func TablePrefix(network string) string { return Prefix + network + "-" }

// ofNetwork says whether table is one of network's daemons' (TableName):
// the prefix alone would also match the tables of a network named
// network-x.
func ofNetwork(table, network string) bool {
	id, ok := strings.CutPrefix(table, TablePrefix(network))
	if !ok || len(id) != 2*idBytes {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// Table is an installed table. Its methods are safe for concurrent use.
type Table struct {
	opts Options

	mu         sync.Mutex
	conn       *nftables.Conn // lasting: its socket owns the table
	table      *nftables.Table
	v4, v6     *nftables.Set
	persistent bool
	removed    bool
}

// Install makes the table, its chain and sets holding addrs, owned by a
// netlink socket of its own that lives until Remove.
func Install(opts Options, addrs []netip.Addr) (*Table, error) {
	if opts.Name == "" {
		return nil, errors.New("nftable: no table name")
	}
	t := &Table{opts: opts, table: &nftables.Table{Name: opts.Name, Family: nftables.TableFamilyINet}}
	var sock *netlink.Conn
	conn, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(opts.NetNS),
		nftables.WithSockOptions(func(c *netlink.Conn) error { sock = c; return nil }))
	if err != nil {
		return nil, fmt.Errorf("nftable: netlink: %w", err)
	}
	t.conn = conn
	flags := uint32(tableFlagOwner)
	if !opts.FailOpen {
		flags |= tableFlagPersist
	}
	err = createTable(sock, t.table, flags)
	if err != nil && flags&tableFlagPersist != 0 && errors.Is(err, unix.EOPNOTSUPP) {
		// A kernel before 6.9: owned but not persistent, so a crash
		// fails open (the daemon logs it).
		flags &^= tableFlagPersist
		err = createTable(sock, t.table, flags)
	}
	if err != nil {
		conn.CloseLasting()
		return nil, fmt.Errorf("nftable: table inet %s: %w", opts.Name, err)
	}
	t.persistent = flags&tableFlagPersist != 0
	if err := t.fill(addrs); err != nil {
		t.Remove()
		return nil, fmt.Errorf("nftable: table inet %s: %w", opts.Name, err)
	}
	return t, nil
}

// Persistent says whether the table outlives the daemon (fail-closed on a
// crash).
func (t *Table) Persistent() bool { return t.persistent }

// Name is the table's name.
func (t *Table) Name() string { return t.opts.Name }

// createTable sends NEWTABLE with flags on sock, the lasting socket of an
// nftables.Conn: google/nftables' AddTable always sends flags 0, and a
// table owned by a socket must be created by that socket with the owner
// flag set.
func createTable(sock *netlink.Conn, t *nftables.Table, flags uint32) error {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: []byte(t.Name + "\x00")},
		{Type: unix.NFTA_TABLE_FLAGS, Data: binaryutil.BigEndian.PutUint32(flags)},
	})
	if err != nil {
		return err
	}
	batchHeader := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES} // res_id big-endian
	msgs := []netlink.Message{
		{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN), Flags: netlink.Request}, Data: batchHeader},
		{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWTABLE),
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl},
			Data: append([]byte{byte(t.Family), unix.NFNETLINK_V0, 0, 0}, attrs...)},
		{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_END), Flags: netlink.Request}, Data: batchHeader},
	}
	sent, err := sock.SendMessages(msgs)
	if err != nil {
		return err
	}
	// The one acknowledgement asked for, or the error that replaces it.
	for {
		replies, err := sock.Receive()
		if err != nil {
			return err
		}
		for _, r := range replies {
			if r.Header.Type == netlink.Error && r.Header.Sequence == sent[1].Header.Sequence {
				return nil
			}
		}
	}
}

// fill adds the chain, sets and rules in one transaction.
func (t *Table) fill(addrs []netip.Addr) error {
	c := t.conn
	chain := c.AddChain(&nftables.Chain{
		Name:  chainName,
		Table: t.table,
		Type:  nftables.ChainTypeFilter,
		// Postrouting rather than forward: traffic to a Service reaches
		// its pod through DNAT, on paths (IPVS) that skip forward, and is
		// seen here with the pod as destination, before source NAT.
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource - 5),
	})
	rule := func(exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t.table, Chain: chain, Exprs: exprs})
	}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	// IPv6 neighbour discovery must never wait for a verdict.
	rule(append(append(nfproto(unix.NFPROTO_IPV6), l4proto(unix.IPPROTO_ICMPV6)...), accept)...)
	// The host's root-owned sockets (kubelet's probes, system daemons).
	rule(&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)}, accept)
	// Only the first packet of a connection is judged.
	rule(&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)}, accept)
	if t.opts.QueueAll {
		rule(t.queue())
		return c.Flush()
	}
	t.v4 = &nftables.Set{Table: t.table, Name: setV4, KeyType: nftables.TypeIPAddr}
	t.v6 = &nftables.Set{Table: t.table, Name: setV6, KeyType: nftables.TypeIP6Addr}
	v4, v6 := elements(addrs)
	if err := c.AddSet(t.v4, v4); err != nil {
		return err
	}
	if err := c.AddSet(t.v6, v6); err != nil {
		return err
	}
	for _, m := range []struct {
		proto        byte
		offset, size uint32
		set          *nftables.Set
	}{
		{unix.NFPROTO_IPV4, 12, 4, t.v4},  // ip saddr
		{unix.NFPROTO_IPV4, 16, 4, t.v4},  // ip daddr
		{unix.NFPROTO_IPV6, 8, 16, t.v6},  // ip6 saddr
		{unix.NFPROTO_IPV6, 24, 16, t.v6}, // ip6 daddr
	} {
		rule(append(nfproto(m.proto),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: m.offset, Len: m.size},
			&expr.Lookup{SourceRegister: 1, SetName: m.set.Name, SetID: m.set.ID},
			t.queue())...)
	}
	return c.Flush()
}

// queue is the rule's verdict: the packet goes to the queue.
func (t *Table) queue() expr.Any {
	return queueExpr(t.opts.Native, t.opts.Queue, t.opts.FailOpen)
}

func queueExpr(native bool, num uint16, bypass bool) expr.Any {
	if native {
		q := &expr.Queue{Num: num}
		if bypass {
			q.Flag = expr.QueueFlagBypass
		}
		return q
	}
	// struct xt_NFQ_info_v3 {u16 queuenum, queues_total, flags}, padded
	// to 8 bytes (XT_ALIGN) as the kernel checks.
	info := make(xt.Unknown, 8)
	binary.NativeEndian.PutUint16(info[0:], num)
	binary.NativeEndian.PutUint16(info[2:], 1)
	if bypass {
		binary.NativeEndian.PutUint16(info[4:], 1) // NFQ_FLAG_BYPASS
	}
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// elements splits addrs into the two sets' elements.
func elements(addrs []netip.Addr) (v4, v6 []nftables.SetElement) {
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, nftables.SetElement{Key: a.AsSlice()})
		} else if a.Is6() {
			v6 = append(v6, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	return v4, v6
}

// SetAddresses replaces the sets' addresses with addrs, in one
// transaction: a packet sees the old sets or the new ones. A no-op when
// the table queues everything.
func (t *Table) SetAddresses(addrs []netip.Addr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.removed {
		return fmt.Errorf("nftable: table inet %s was removed", t.opts.Name)
	}
	if t.opts.QueueAll {
		return nil
	}
	v4, v6 := elements(addrs)
	t.conn.FlushSet(t.v4)
	t.conn.FlushSet(t.v6)
	if err := t.conn.SetAddElements(t.v4, v4); err != nil {
		return err
	}
	if err := t.conn.SetAddElements(t.v6, v6); err != nil {
		return err
	}
	if err := t.conn.Flush(); err != nil {
		return fmt.Errorf("nftable: table inet %s: sets: %w", t.opts.Name, err)
	}
	return nil
}

// Remove deletes the table and closes its socket. Idempotent.
func (t *Table) Remove() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.removed {
		return nil
	}
	t.removed = true
	t.conn.DelTable(t.table)
	err := t.conn.Flush()
	// Closing the owner socket would remove a table that is not
	// persistent anyway; a persistent one is left orphaned if the delete
	// failed, for RemoveOrphans.
	t.conn.CloseLasting()
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftable: deleting table inet %s: %w", t.opts.Name, err)
	}
	return nil
}

// RemoveOrphans deletes the tables of network's daemons (TableName) that
// no live socket owns (left by daemons that died) in the network
// namespace netns (0: the current one), and returns their names. Live
// daemons' tables are left alone: the kernel refuses to delete a table
// another socket owns.
func RemoveOrphans(netns int, network string) ([]string, error) {
	c, err := nftables.New(nftables.WithNetNSFd(netns))
	if err != nil {
		return nil, fmt.Errorf("nftable: netlink: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nftable: listing tables: %w", err)
	}
	var removed []string
	var errs []error
	for _, tb := range tables {
		if !ofNetwork(tb.Name, network) || tb.Flags&tableFlagOwner != 0 {
			continue
		}
		c.DelTable(tb)
		if err := c.Flush(); err != nil {
			if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("deleting table inet %s: %w", tb.Name, err))
			}
			continue
		}
		removed = append(removed, tb.Name)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("nftable: %w", errors.Join(errs...))
	}
	return removed, nil
}

// QueueExprSupported says whether the kernel of network namespace netns
// (0: the current one) has nft's queue expression: it loads one in a
// throwaway table of its own (owned, so it goes even if the caller dies
// in between). False with a nil error means the kernel answered that it
// has no such expression.
func QueueExprSupported(netns int) (bool, error) {
	var sock *netlink.Conn
	conn, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(netns),
		nftables.WithSockOptions(func(c *netlink.Conn) error { sock = c; return nil }))
	if err != nil {
		return false, fmt.Errorf("nftable: netlink: %w", err)
	}
	defer conn.CloseLasting()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := &nftables.Table{Name: Prefix + "probe-" + hex.EncodeToString(b), Family: nftables.TableFamilyINet}
	if err := createTable(sock, table, tableFlagOwner); err != nil {
		return false, fmt.Errorf("nftable: probe table: %w", err)
	}
	// A regular chain: the rule never sees a packet.
	chain := conn.AddChain(&nftables.Chain{Name: "probe", Table: table})
	conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{queueExpr(true, 1, true)}})
	loadErr := conn.Flush()
	conn.DelTable(table)
	if err := conn.Flush(); err != nil {
		return false, fmt.Errorf("nftable: deleting probe table: %w", err)
	}
	switch {
	case loadErr == nil:
		return true, nil
	case errors.Is(loadErr, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("nftable: probing nft queue: %w", loadErr)
}
