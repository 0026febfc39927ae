package testutil

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// IPv4In returns the IPv4 addresses of link in the network namespace
// mounted at path, or nil when the link does not exist there.
func IPv4In(t testing.TB, path, link string) []net.IP {
	t.Helper()
	h := handleIn(t, path)
	defer h.Close()
	l, err := h.LinkByName(link)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		t.Fatalf("link %s in %s: %v", link, path, err)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	ips := []net.IP{}
	for _, a := range addrs {
		ips = append(ips, a.IP)
	}
	return ips
}

// LinkMAC returns the hardware address of link in the network namespace
// mounted at path.
func LinkMAC(t testing.TB, path, link string) string {
	t.Helper()
	h := handleIn(t, path)
	defer h.Close()
	l, err := h.LinkByName(link)
	if err != nil {
		t.Fatalf("link %s in %s: %v", link, path, err)
	}
	return l.Attrs().HardwareAddr.String()
}

// HasIP reports whether ips holds ip.
func HasIP(ips []net.IP, ip net.IP) bool {
	for _, x := range ips {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}

// SyncBuffer is a bytes.Buffer that a process's output goroutines and the
// test can use at the same time.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// handleIn opens a netlink handle in the network namespace at path
// (netnsfile.Handle).
func handleIn(t testing.TB, path string) *netlink.Handle {
	t.Helper()
	h, err := netnsfile.Handle(path)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// FreePort is a TCP port on 127.0.0.1 that nothing listens on now (the
// kernel picked it for a listener FreePort closed again).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
