package networkpod

import (
	"encoding/binary"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// rtAttr is one rtnetlink attribute, padded.
func rtAttr(typ uint16, value []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(value)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func rtMessage(typ uint16, body ...[]byte) syscall.NetlinkMessage {
	var data []byte
	for _, b := range body {
		data = append(data, b...)
	}
	return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Len: uint32(16 + len(data)), Type: typ}, Data: data}
}

func addrMessage(typ uint16, ip string, plen byte, index uint32) syscall.NetlinkMessage {
	a := net.ParseIP(ip)
	family := byte(unix.AF_INET6)
	if a4 := a.To4(); a4 != nil {
		a, family = a4, unix.AF_INET
	}
	hdr := []byte{family, plen, 0, 0}
	hdr = binary.NativeEndian.AppendUint32(hdr, index)
	return rtMessage(typ, hdr, rtAttr(unix.IFA_ADDRESS, a))
}

func routeMessage(typ uint16, dst string, proto byte, table byte) syscall.NetlinkMessage {
	_, n, _ := net.ParseCIDR(dst)
	ones, _ := n.Mask.Size()
	ip, family := n.IP, byte(unix.AF_INET6)
	if ip4 := ip.To4(); ip4 != nil {
		ip, family = ip4, unix.AF_INET
	}
	hdr := []byte{family, byte(ones), 0, 0, table, proto, 0, unix.RTN_UNICAST, 0, 0, 0, 0}
	return rtMessage(typ, hdr, rtAttr(unix.RTA_DST, ip))
}

// linkMessage is a link's notification; change is its ifi_change
// (linkRegistered when the link appears).
func linkMessage(typ uint16, index int32, name string, change uint32) syscall.NetlinkMessage {
	hdr := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(hdr[4:], uint32(index))
	binary.NativeEndian.PutUint32(hdr[12:], change)
	return rtMessage(typ, hdr, rtAttr(unix.IFLA_IFNAME, append([]byte(name), 0)))
}

// TestTrespassModel: what the watch counts as a change of a pod (a link,
// an address or a route made or removed) and what it leaves to the
// kernel (link-local addresses, the kernel's and router advertisements'
// routes, the local table, a repeat of what it saw).
func TestTrespassModel(t *testing.T) {
	m := &podModel{links: map[int32]bool{}, addrs: map[string]bool{}, routes: map[string]bool{}}
	for _, c := range []struct {
		name   string
		msg    syscall.NetlinkMessage
		change string // "" when not one
	}{
		{"lo brought up by the runtime, first heard of", linkMessage(unix.RTM_NEWLINK, 1, "lo", unix.IFF_UP), ""},
		{"a link that was there, first heard of (its state)", linkMessage(unix.RTM_NEWLINK, 3, "eth0", 0), ""},
		{"a link made", linkMessage(unix.RTM_NEWLINK, 4, "veth9", linkRegistered), `link "veth9" (index 4) made`},
		{"the link again (a flag, a state)", linkMessage(unix.RTM_NEWLINK, 4, "veth9", unix.IFF_UP), ""},
		{"an address added", addrMessage(unix.RTM_NEWADDR, "10.219.0.7", 24, 4), "address 10.219.0.7/24 on index 4 added"},
		{"the address again (DAD done)", addrMessage(unix.RTM_NEWADDR, "10.219.0.7", 24, 4), ""},
		{"an IPv6 link-local address", addrMessage(unix.RTM_NEWADDR, "fe80::1", 64, 4), ""},
		{"an IPv6 address", addrMessage(unix.RTM_NEWADDR, "fd00:219::7", 64, 4), "address fd00:219::7/64 on index 4 added"},
		{"a route by a plugin", routeMessage(unix.RTM_NEWROUTE, "10.220.0.0/16", unix.RTPROT_BOOT, unix.RT_TABLE_MAIN), "route 10.220.0.0/16 table 254 added"},
		{"the kernel's route of an address", routeMessage(unix.RTM_NEWROUTE, "10.219.0.0/24", unix.RTPROT_KERNEL, unix.RT_TABLE_MAIN), ""},
		{"a router advertisement's route", routeMessage(unix.RTM_NEWROUTE, "fd00:221::/64", unix.RTPROT_RA, unix.RT_TABLE_MAIN), ""},
		{"a local table route", routeMessage(unix.RTM_NEWROUTE, "10.222.0.1/32", unix.RTPROT_BOOT, unix.RT_TABLE_LOCAL), ""},
		{"the plugin's route removed", routeMessage(unix.RTM_DELROUTE, "10.220.0.0/16", unix.RTPROT_BOOT, unix.RT_TABLE_MAIN), "route 10.220.0.0/16 table 254 removed"},
		{"the address removed", addrMessage(unix.RTM_DELADDR, "10.219.0.7", 24, 4), "address 10.219.0.7/24 on index 4 removed"},
		{"the link removed", linkMessage(unix.RTM_DELLINK, 4, "veth9", linkRegistered), `link "veth9" (index 4) removed`},
		{"lo going with its namespace", linkMessage(unix.RTM_DELLINK, 1, "lo", linkRegistered), ""},
	} {
		change := describeChange(c.msg)
		counted := change != "" && m.apply(c.msg)
		got := ""
		if counted {
			got = change
		}
		if got != c.change {
			t.Errorf("%s: counted %q, want %q", c.name, got, c.change)
		}
	}
}
