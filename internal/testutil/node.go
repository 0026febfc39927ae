package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NodeLink is a node namespace's link to the test's: a veth whose end
// Host (with HostAddrs) stays in the test's namespace and whose other end
// is Name in the node's, with Addrs.
type NodeLink struct {
	Host      string
	HostAddrs []string // CIDR notation, e.g. 10.203.0.1/30
	Name      string
	Addrs     []string
}

// NewNodeNetns makes a network namespace at path (a file that must not
// exist, in t.TempDir()) standing for a node: lo up and l's veth, both
// ends up with their addresses (without duplicate address detection, so
// IPv6 ones are usable at once). Both go when t ends.
func NewNodeNetns(t testing.TB, path string, l NodeLink) string {
	t.Helper()
	NewNetnsFile(t, path)
	peer := l.Host + "p"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.Host}, PeerName: peer}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if link, err := netlink.LinkByName(l.Host); err == nil {
			_ = netlink.LinkDel(link)
		}
	})
	host, err := netlink.LinkByName(l.Host)
	if err != nil {
		t.Fatal(err)
	}
	upWithAddrs(t, netlink.Handle{}, host, l.HostAddrs)
	ns, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	p, err := netlink.LinkByName(peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(p, int(ns.Fd())); err != nil {
		t.Fatal(err)
	}
	h, err := netnsfile.Handle(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if p, err = h.LinkByName(peer); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetName(p, l.Name); err != nil {
		t.Fatal(err)
	}
	upWithAddrs(t, *h, p, l.Addrs)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	upWithAddrs(t, *h, lo, nil)
	return path
}

func upWithAddrs(t testing.TB, h netlink.Handle, l netlink.Link, addrs []string) {
	t.Helper()
	for _, a := range addrs {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			t.Fatal(err)
		}
		addr.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(l, addr); err != nil {
			t.Fatalf("%s on %s: %v", a, l.Attrs().Name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
}

// ChildNamed waits for the child of pid whose command (comm) is name and
// returns its pid. A Go program forks from any of its threads: every
// task's children are looked at.
func ChildNamed(t testing.TB, pid int, name string) int {
	t.Helper()
	var found int
	WaitFor(t, 10*time.Second, name+" among the children of "+strconv.Itoa(pid), func() error {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
			for _, f := range strings.Fields(string(b)) {
				c, _ := strconv.Atoi(f)
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c)); strings.TrimSpace(string(comm)) == name {
					found = c
					return nil
				}
			}
		}
		return fmt.Errorf("no child named %s", name)
	})
	return found
}
