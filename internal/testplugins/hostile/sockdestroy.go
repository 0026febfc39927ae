package main

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// sockDestroy closes a TCP connection of the host, given on stdin
// ({"src": "127.0.0.1:1234", "dst": "127.0.0.1:5678"}, the side to close),
// with sock_diag's SOCK_DESTROY: allowed by design (docs/security.md).
func sockDestroy() map[string]string {
	r := map[string]string{}
	var t struct{ Src, Dst string }
	b, _ := io.ReadAll(os.Stdin)
	if err := json.Unmarshal(b, &t); err != nil {
		r["stdin"] = err.Error()
		return r
	}
	src, err1 := netip.ParseAddrPort(t.Src)
	dst, err2 := netip.ParseAddrPort(t.Dst)
	if err1 != nil || err2 != nil || !src.Addr().Is4() || !dst.Addr().Is4() {
		r["stdin"] = "want IPv4 src and dst"
		return r
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		r["SOCK_DESTROY"] = outcome(err)
		return r
	}
	defer unix.Close(fd)
	// struct inet_diag_req_v2: family, protocol, ext, pad, states, then
	// struct inet_diag_sockid (ports and addresses big-endian, the
	// cookie ~0: any).
	req := []byte{unix.AF_INET, unix.IPPROTO_TCP, 0, 0}
	req = binary.NativeEndian.AppendUint32(req, ^uint32(0))
	req = binary.BigEndian.AppendUint16(req, src.Port())
	req = binary.BigEndian.AppendUint16(req, dst.Port())
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	req = append(append(req, s4[:]...), make([]byte, 12)...)
	req = append(append(req, d4[:]...), make([]byte, 12)...)
	req = binary.NativeEndian.AppendUint32(req, 0)
	req = binary.NativeEndian.AppendUint32(req, ^uint32(0))
	req = binary.NativeEndian.AppendUint32(req, ^uint32(0))
	const sockDestroyType = 21
	r["SOCK_DESTROY"] = outcome(nlDo(fd, sockDestroyType, 0, req))
	return r
}
