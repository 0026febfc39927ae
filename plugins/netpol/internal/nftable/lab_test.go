package nftable

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	nfqueue "github.com/florianl/go-nfqueue"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The lab: a "node" network namespace with a bridge and a routed link, and
// "pods" in namespaces of their own, all made by the test and gone with
// its namespaces (closing the last handle of a namespace removes it and
// every link in it; a veth goes with either end).

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("KURMA_REQUIRE_ROOT") == "1" {
		t.Fatal("needs root (KURMA_REQUIRE_ROOT=1)")
	}
	t.Skip("needs root")
}

// newNetns makes a network namespace, closed (and so removed) at the
// test's end.
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		// The thread stays in ns: leave it locked so it dies with the
		// goroutine rather than serve another one.
		ns.Close()
		t.Fatalf("back to the test's netns: %v", err)
	}
	runtime.UnlockOSThread()
	t.Cleanup(func() { ns.Close() })
	return ns
}

// inNetns runs fn on a thread in ns; sockets fn makes stay in ns.
func inNetns(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("back to the test's netns: %w", err) // thread stays locked and dies
	}
	runtime.UnlockOSThread()
	return ferr
}

func sysctl(ns netns.NsHandle, path, value string) error {
	return inNetns(ns, func() error { return os.WriteFile(path, []byte(value), 0o644) })
}

type labPod struct {
	name string
	ns   netns.NsHandle
	v4   netip.Addr
	v6   netip.Addr // zero when the pod has none
}

type lab struct {
	node netns.NsHandle
	pods map[string]*labPod
}

// newLab builds the node and three pods: a and b on bridge br0
// (10.88.0.0/24, fd00:88::/64), c on a routed veth (10.99.0.0/24).
func newLab(t *testing.T) *lab {
	t.Helper()
	l := &lab{node: newNetns(t), pods: map[string]*labPod{}}
	nh, err := netlink.NewHandleAt(l.node)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	for _, s := range [][2]string{
		{"/proc/sys/net/ipv4/ip_forward", "1"},
		{"/proc/sys/net/ipv6/conf/all/forwarding", "1"},
		{"/proc/sys/net/bridge/bridge-nf-call-iptables", "1"},
		{"/proc/sys/net/bridge/bridge-nf-call-ip6tables", "1"},
	} {
		if err := sysctl(l.node, s[0], s[1]); err != nil {
			t.Fatalf("sysctl %s in the node netns: %v", s[0], err)
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	lo, err := nh.LinkByName("lo")
	must("node lo", err)
	must("node lo up", nh.LinkSetUp(lo))
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	must("bridge", nh.LinkAdd(br))
	must("bridge address", nh.AddrAdd(br, addr("10.88.0.1/24")))
	must("bridge address", nh.AddrAdd(br, addr6("fd00:88::1/64")))
	must("bridge up", nh.LinkSetUp(br))

	for _, p := range []struct {
		name, cidr, cidr6, gw, gw6 string
		bridged                    bool
	}{
		{"a", "10.88.0.2/24", "fd00:88::2/64", "10.88.0.1", "fd00:88::1", true},
		{"b", "10.88.0.3/24", "fd00:88::3/64", "10.88.0.1", "fd00:88::1", true},
		{"c", "10.99.0.2/24", "", "10.99.0.1", "", false},
	} {
		pod := &labPod{name: p.name, ns: newNetns(t), v4: netip.MustParsePrefix(p.cidr).Addr()}
		host := "veth-" + p.name
		must("veth "+p.name, nh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host},
			PeerName: "eth0", PeerNamespace: netlink.NsFd(pod.ns)}))
		hl, err := nh.LinkByName(host)
		must(host, err)
		if p.bridged {
			must(host+" on br0", nh.LinkSetMaster(hl, br))
		} else {
			must(host+" address", nh.AddrAdd(hl, addr("10.99.0.1/24")))
		}
		must(host+" up", nh.LinkSetUp(hl))

		ph, err := netlink.NewHandleAt(pod.ns)
		must("pod netns", err)
		pl, err := ph.LinkByName("eth0")
		must(p.name+" eth0", err)
		must(p.name+" address", ph.AddrAdd(pl, addr(p.cidr)))
		if p.cidr6 != "" {
			must(p.name+" v6 address", ph.AddrAdd(pl, addr6(p.cidr6)))
			pod.v6 = netip.MustParsePrefix(p.cidr6).Addr()
		}
		must(p.name+" up", ph.LinkSetUp(pl))
		plo, err := ph.LinkByName("lo")
		must(p.name+" lo", err)
		must(p.name+" lo up", ph.LinkSetUp(plo))
		must(p.name+" route", ph.RouteAdd(&netlink.Route{Gw: net.ParseIP(p.gw)}))
		if p.gw6 != "" {
			must(p.name+" v6 route", ph.RouteAdd(&netlink.Route{Gw: net.ParseIP(p.gw6), LinkIndex: pl.Attrs().Index}))
		}
		ph.Close()
		l.pods[p.name] = pod
	}
	return l
}

func addr(cidr string) *netlink.Addr {
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		panic(err)
	}
	return a
}

// addr6 is an IPv6 address without duplicate address detection, usable at
// once.
func addr6(cidr string) *netlink.Addr {
	a := addr(cidr)
	a.Flags = unix.IFA_F_NODAD
	return a
}

// serve runs a line echo server on port 8080 of every address of pod p,
// until the test ends.
func (l *lab) serve(t *testing.T, p *labPod) {
	t.Helper()
	var ln net.Listener
	err := inNetns(p.ns, func() error {
		var err error
		ln, err = net.Listen("tcp", ":8080")
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", p.name, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// dial connects from pod from to port 8080 of to, waiting at most limit.
func (l *lab) dial(from *labPod, to netip.Addr, limit time.Duration) (net.Conn, error) {
	var c net.Conn
	err := inNetns(from.ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(to, 8080).String(), limit)
		return err
	})
	return c, err
}

// echo sends n lines over c and reads each back.
func echo(c net.Conn, n int) error {
	r := bufio.NewReader(c)
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	for i := range n {
		msg := fmt.Sprintf("line %d\n", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		got, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if got != msg {
			return fmt.Errorf("echo %q, want %q", got, msg)
		}
	}
	return nil
}

// queued is one packet the listener got.
type queued struct {
	src, dst netip.Addr
	syn      bool // a TCP SYN without ACK: a connection's first packet
}

func (q queued) String() string { return fmt.Sprintf("%s→%s syn=%v", q.src, q.dst, q.syn) }

// listener is the test's nfqueue reader: it stands where the library's
// engine stands in the daemon, recording every packet and giving the
// verdict of the moment.
type listener struct {
	nf     *nfqueue.Nfqueue
	cancel context.CancelFunc

	mu      sync.Mutex
	got     []queued
	verdict int
}

func (l *lab) listen(t *testing.T, queue uint16) *listener {
	t.Helper()
	nf, err := nfqueue.Open(&nfqueue.Config{NfQueue: queue, NetNS: int(l.node), MaxPacketLen: 128, MaxQueueLen: 1024,
		Copymode: nfqueue.NfQnlCopyPacket, WriteTimeout: 100 * time.Millisecond, Flags: nfqueue.NfQaCfgFlagGSO})
	if err != nil {
		t.Fatalf("nfqueue %d: %v", queue, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ls := &listener{nf: nf, cancel: cancel, verdict: nfqueue.NfAccept}
	err = nf.RegisterWithErrorFunc(ctx, func(a nfqueue.Attribute) int {
		q := parse(*a.Payload)
		ls.mu.Lock()
		ls.got = append(ls.got, q)
		v := ls.verdict
		ls.mu.Unlock()
		_ = nf.SetVerdict(*a.PacketID, v)
		return 0
	}, func(error) int { return 0 })
	if err != nil {
		cancel()
		nf.Close()
		t.Fatalf("nfqueue %d: register: %v", queue, err)
	}
	t.Cleanup(ls.close)
	return ls
}

// close unbinds the queue. go-nfqueue's reader stops on its context only,
// so that goes first.
func (ls *listener) close() {
	ls.cancel()
	ls.nf.Close()
}

func (ls *listener) setVerdict(v int) {
	ls.mu.Lock()
	ls.verdict = v
	ls.mu.Unlock()
}

// take returns the packets got since the last take.
func (ls *listener) take() []queued {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	got := ls.got
	ls.got = nil
	return got
}

// parse reads the addresses of an IPv4 or IPv6 packet and whether it is a
// TCP SYN.
func parse(b []byte) queued {
	var q queued
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		q.src, _ = netip.AddrFromSlice(b[12:16])
		q.dst, _ = netip.AddrFromSlice(b[16:20])
		ihl := int(b[0]&0xf) * 4
		q.syn = b[9] == unix.IPPROTO_TCP && len(b) > ihl+13 && b[ihl+13]&0x12 == 0x02
	case len(b) >= 40 && b[0]>>4 == 6:
		q.src, _ = netip.AddrFromSlice(b[8:24])
		q.dst, _ = netip.AddrFromSlice(b[24:40])
		q.syn = b[6] == unix.IPPROTO_TCP && len(b) > 40+13 && b[40+13]&0x12 == 0x02
	}
	return q
}

// nftIn runs nft with args in network namespace ns.
func nftIn(t *testing.T, ns netns.NsHandle, args ...string) string {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(ns)), "nft"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nft %v: %v\n%s", args, err, out)
	}
	return string(out)
}
