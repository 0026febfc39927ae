package networkpod

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Trespass detection. The host's network namespace holds an id for every
// pod namespace with a link to the host (a veth's peer, a macvlan's
// parent), and with CAP_NET_ADMIN a netlink request naming that id
// (IFLA_TARGET_NETNSID, IFLA_LINK_NETNSID, a veth peer's IFLA_NET_NS_PID)
// reaches the pod from the host's namespace without any descriptor of it.
// Nothing on Linux keeps a plugin, which must configure the host's
// network, from sending one: the capability checks cannot tell one pod
// from another (they are all the initial user namespace's), a seccomp
// filter cannot read a message, and a seccomp supervisor that reads it
// races whatever another thread of the plugin puts at that descriptor
// before the kernel acts, unless it made every write of every plugin
// process itself. The kernel's BPF LSM could refuse such a message where
// it is enabled and its programs allowed (docs/security.md).
//
// So kurmad watches instead. One netlink socket of kurmad's (the host's
// namespace), listening to every namespace that has an id there
// (NETLINK_LISTEN_ALL_NSID: exactly those an id reaches), hears each link,
// address and route made or removed in them. A change in one of kurmad's
// pods while no call of that pod runs (nor a gc call, which may touch every
// pod) was made by someone else: every call running at that moment fails
// with a *TrespassError naming the pod and the change, kurmad logs it, and
// the network's status says so (Status.Trespass). The calls' own changes,
// and what the kernel does on its own (an IPv6 address's link-local
// sibling, its duplicate address detection, the kernel's and router
// advertisements' routes), are not counted.

// TrespassError fails a call during which a pod it was not for changed.
type TrespassError struct {
	Pod    string // the netns file's name in the netns dir (the pod's uuid)
	Change string // e.g. `link "veth0" (index 4) made`
}

func (e *TrespassError) Error() string {
	return fmt.Sprintf("pod %s's network namespace changed while this call ran, and no call of that pod did: %s", e.Pod, e.Change)
}

// ErrTrespass is what a *TrespassError is (errors.Is).
var ErrTrespass = errors.New("a call changed another pod's network namespace")

// Is makes a trespass a plugin failure too: the call's plugin is the one
// to doubt.
func (e *TrespassError) Is(target error) bool {
	return target == ErrTrespass || target == netplugin.ErrPluginFailed
}

// trespassWatch is a Host's watch.
type trespassWatch struct {
	dir  string // the netns dir: kurmad's pods
	fd   int    // the listening socket, -1 when the watch could not start
	host uint64 // kurmad's network namespace's inode

	mu      sync.Mutex
	calls   map[*watchedCall]struct{}
	pods    map[uint64]*podModel // by namespace inode
	nsids   map[int32]podRef     // by nsid (in the host's namespace): kurmad's pods that have one
	scanned bool                 // the netns dir's entries were learnt once
	// relearnt is set once, in a drain, the running calls' pods were
	// learnt again for an id not known.
	relearnt bool
	buf      []byte // a notification batch
	oob      []byte
	outside  []TrespassError // changes while no call ran, to log
}

// podRef is one of kurmad's pods: its namespace's inode and its name in
// the netns dir.
type podRef struct {
	ino  uint64
	name string
}

// watchedCall is a running call: the namespaces it may change.
type watchedCall struct {
	names    []string // the pods', in the netns dir
	netns    map[uint64]bool
	any      bool // a gc call
	trespass []TrespassError
}

const (
	// loopbackIndex is lo's index in every network namespace.
	loopbackIndex = 1
	// linkRegistered is ifi_change of the RTM_NEWLINK the kernel sends
	// when a link appears in a namespace (rtmsg_ifinfo(..., ~0U, ...)).
	linkRegistered = ^uint32(0)
)

// podModel is what the watch has seen of one namespace: its links,
// addresses and routes, to tell a change from a repeat.
type podModel struct {
	links  map[int32]bool
	addrs  map[string]bool
	routes map[string]bool
}

// newTrespassWatch opens the socket; a watch that cannot (no
// CAP_NET_BROADCAST, say) is inert and says why.
func newTrespassWatch(dir string) (*trespassWatch, error) {
	w := &trespassWatch{dir: dir, fd: -1, calls: map[*watchedCall]struct{}{}, pods: map[uint64]*podModel{}, nsids: map[int32]podRef{},
		buf: make([]byte, 64<<10), oob: make([]byte, unix.CmsgSpace(4))}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return w, err
	}
	w.host = st.Ino
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return w, err
	}
	fail := func(what string, err error) (*trespassWatch, error) {
		unix.Close(fd)
		return w, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail("bind", err)
	}
	// Room for the changes of a busy host between two calls' ends.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	for _, g := range []int{unix.RTNLGRP_LINK, unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE} {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g); err != nil {
			return fail("join the rtnetlink groups", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_LISTEN_ALL_NSID, 1); err != nil {
		return fail("listen to every namespace", err)
	}
	w.fd = fd
	return w, nil
}

func (w *trespassWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

// begin registers a call that may change the namespaces of inodes netns
// (and any, for gc). What happened before it began is not its doing.
func (w *trespassWatch) begin(names []string, netns []uint64, any bool) *watchedCall {
	c := &watchedCall{names: names, netns: map[uint64]bool{}, any: any}
	for _, ns := range netns {
		c.netns[ns] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drainLocked()
	w.calls[c] = struct{}{}
	return c
}

// end reads every change made so far (all of the call's: the kernel
// queued them before its processes exited), unregisters the call and
// returns the trespasses seen while it ran.
func (w *trespassWatch) end(c *watchedCall) []TrespassError {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drainLocked()
	delete(w.calls, c)
	if w.fd >= 0 {
		w.learnLocked(c.names)
	}
	return c.trespass
}

// takeOutside returns, and forgets, the trespasses seen while no call ran.
func (w *trespassWatch) takeOutside() []TrespassError {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drainLocked()
	out := w.outside
	w.outside = nil
	return out
}

// drainLocked reads every queued notification.
func (w *trespassWatch) drainLocked() {
	if w.fd < 0 {
		return
	}
	buf, oob := w.buf, w.oob
	w.relearnt = false
	for {
		n, oobn, _, _, err := unix.Recvmsg(w.fd, buf, oob, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENOBUFS) {
			// Changes were lost: those of pods no call runs for cannot be
			// told apart any more; say so, as a trespass of no pod.
			w.blameLocked(0, "", "notifications lost (the socket's buffer overflowed): changes of pods unseen")
			continue
		}
		if err != nil || n == 0 {
			return
		}
		nsid := int32(-1)
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_NETLINK && m.Header.Type == unix.NETLINK_LISTEN_ALL_NSID && len(m.Data) >= 4 {
					nsid = int32(binary.NativeEndian.Uint32(m.Data))
				}
			}
		}
		if nsid < 0 {
			continue // the host's own namespace: plugins configure it
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			w.noteLocked(nsid, m)
		}
	}
}

// noteLocked records one notification from the namespace of id nsid.
func (w *trespassWatch) noteLocked(nsid int32, m syscall.NetlinkMessage) {
	change := describeChange(m)
	if change == "" {
		return
	}
	ns, pod := w.podOfLocked(nsid)
	if ns == 0 {
		return // not one of kurmad's pods (any more)
	}
	model := w.pods[ns]
	if model == nil {
		model = &podModel{links: map[int32]bool{}, addrs: map[string]bool{}, routes: map[string]bool{}}
		w.pods[ns] = model
	}
	if !model.apply(m) {
		return // a repeat: a flag or a state changed
	}
	for c := range w.calls {
		if c.any || c.netns[ns] {
			return // a call of that pod runs: its doing, or may be
		}
	}
	w.blameLocked(ns, pod, change)
}

// blameLocked records a trespass on pod against every call running.
func (w *trespassWatch) blameLocked(ns uint64, pod, change string) {
	t := TrespassError{Pod: pod, Change: change}
	if pod == "" {
		t.Pod = "(unknown)"
	}
	if len(w.calls) == 0 {
		w.outside = append(w.outside, t)
		return
	}
	for c := range w.calls {
		if ns != 0 && c.netns[ns] {
			continue
		}
		c.trespass = append(c.trespass, t)
	}
}

// podOfLocked maps an nsid to the namespace inode and name of one of
// kurmad's pods, 0 and "" for another namespace. An id kurmad learnt
// (learnLocked) is checked against the netns dir: ids are freed with their
// namespace and given again.
func (w *trespassWatch) podOfLocked(nsid int32) (uint64, string) {
	if !w.scanned {
		w.scanned = true
		entries, _ := os.ReadDir(w.dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		w.learnLocked(names)
	}
	ref, ok := w.nsids[nsid]
	if !ok && !w.relearnt {
		// The pods of the calls running may have got theirs since.
		w.relearnt = true
		for c := range w.calls {
			w.learnLocked(c.names)
		}
		ref, ok = w.nsids[nsid]
	}
	if !ok {
		return 0, ""
	}
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(w.dir, ref.name), &st) != nil || st.Ino != ref.ino {
		delete(w.nsids, nsid)
		delete(w.pods, ref.ino)
		return 0, ""
	}
	return ref.ino, ref.name
}

// learnLocked asks the kernel for the ids the host's namespace gives the
// netns dir's entries of those names (a pod gets its id when its first
// link to the host is made: in a call of that pod, at whose end kurmad
// learns it).
func (w *trespassWatch) learnLocked(names []string) {
	for _, name := range names {
		f, err := os.OpenFile(filepath.Join(w.dir, name), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		var fs unix.Statfs_t
		if unix.Fstat(int(f.Fd()), &st) == nil && unix.Fstatfs(int(f.Fd()), &fs) == nil && fs.Type == unix.NSFS_MAGIC && st.Ino != w.host {
			if id, err := netlink.GetNetNsIdByFd(int(f.Fd())); err == nil && id >= 0 {
				w.nsids[int32(id)] = podRef{ino: st.Ino, name: name}
			}
		}
		f.Close()
	}
}

// apply records m in the model and says whether it made or removed
// something.
func (p *podModel) apply(m syscall.NetlinkMessage) bool {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		if len(m.Data) < unix.SizeofIfInfomsg {
			return false
		}
		idx := int32(binary.NativeEndian.Uint32(m.Data[4:8]))
		had := p.links[idx]
		if m.Header.Type == unix.RTM_DELLINK {
			delete(p.links, idx)
			// lo goes only with its namespace, which is no trespass.
			return idx != loopbackIndex
		}
		p.links[idx] = true
		// The kernel says ifi_change ~0 of a link registered (made or
		// moved in) and the flags that changed of one that was there:
		// a runtime bringing up the pod's lo, say, is no new link, even
		// the first time the watch hears of it.
		return !had && binary.NativeEndian.Uint32(m.Data[12:16]) == linkRegistered
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		key := addrKey(m)
		if key == "" {
			return false
		}
		had := p.addrs[key]
		if m.Header.Type == unix.RTM_DELADDR {
			delete(p.addrs, key)
			return had
		}
		p.addrs[key] = true
		return !had
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		key := routeKey(m)
		if key == "" {
			return false
		}
		had := p.routes[key]
		if m.Header.Type == unix.RTM_DELROUTE {
			delete(p.routes, key)
			return had
		}
		p.routes[key] = true
		return !had
	}
	return false
}

// describeChange words a notification that may be a trespass; "" for one
// that is not (the kernel's own).
func describeChange(m syscall.NetlinkMessage) string {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		if len(m.Data) < unix.SizeofIfInfomsg {
			return ""
		}
		idx := int32(binary.NativeEndian.Uint32(m.Data[4:8]))
		name := ""
		if attrs, err := syscall.ParseNetlinkRouteAttr(&m); err == nil {
			for _, a := range attrs {
				if a.Attr.Type == unix.IFLA_IFNAME {
					name = strings.TrimRight(string(a.Value), "\x00")
				}
			}
		}
		verb := "made"
		if m.Header.Type == unix.RTM_DELLINK {
			verb = "removed"
		}
		return fmt.Sprintf("link %q (index %d) %s", name, idx, verb)
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		key := addrKey(m)
		if key == "" {
			return ""
		}
		verb := "added"
		if m.Header.Type == unix.RTM_DELADDR {
			verb = "removed"
		}
		return "address " + key + " " + verb
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		key := routeKey(m)
		if key == "" {
			return ""
		}
		verb := "added"
		if m.Header.Type == unix.RTM_DELROUTE {
			verb = "removed"
		}
		return "route " + key + " " + verb
	}
	return ""
}

// addrKey names an address notification's address ("10.1.0.2/24 on
// index 3"); "" for an IPv6 link-local one, which the kernel adds itself.
func addrKey(m syscall.NetlinkMessage) string {
	if len(m.Data) < unix.SizeofIfAddrmsg {
		return ""
	}
	plen, idx := m.Data[1], binary.NativeEndian.Uint32(m.Data[4:8])
	attrs, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		return ""
	}
	var ip net.IP
	for _, a := range attrs {
		if a.Attr.Type == unix.IFA_LOCAL || (a.Attr.Type == unix.IFA_ADDRESS && ip == nil) {
			ip = net.IP(a.Value)
		}
	}
	if ip == nil || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
		return ""
	}
	return fmt.Sprintf("%s/%d on index %d", ip, plen, idx)
}

// routeKey names a route notification's route ("10.2.0.0/16 table 254");
// "" for the kernel's (its local table, the routes of its addresses and
// links, redirects) and router advertisements'.
func routeKey(m syscall.NetlinkMessage) string {
	if len(m.Data) < unix.SizeofRtMsg {
		return ""
	}
	dstLen, table, proto := m.Data[1], uint32(m.Data[4]), m.Data[5]
	switch proto {
	case unix.RTPROT_KERNEL, unix.RTPROT_REDIRECT, unix.RTPROT_RA:
		return ""
	}
	family := m.Data[0]
	attrs, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		return ""
	}
	dst := "default"
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.RTA_DST:
			dst = fmt.Sprintf("%s/%d", net.IP(a.Value), dstLen)
		case unix.RTA_TABLE:
			if len(a.Value) >= 4 {
				table = binary.NativeEndian.Uint32(a.Value)
			}
		}
	}
	if table == unix.RT_TABLE_LOCAL {
		return ""
	}
	if family == unix.AF_INET6 && dst == "default" {
		dst = "default (IPv6)"
	}
	return fmt.Sprintf("%s table %d", dst, table)
}
