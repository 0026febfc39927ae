package agent

import (
	"slices"

	"golang.org/x/sys/unix"
)

// The seccomp filter's allowlists: the ioctl requests and the netlink
// families a plugin may use; every other ioctl, and a netlink socket of any
// other family, fails with EPERM. A denylist loses to the next ioctl or
// family nobody thought of (freezing the host's filesystem through a
// read-only bind mount, a uevent the kernel rebroadcasts as its own), so
// these list what network plugins use: what the CNI reference plugins,
// flanneld, nft and kurma's own programs call (TestAllowlistsCoverPlugins,
// in pkg/networkpod, runs them under strace and checks every request and
// family they make is here), and the requests of the same kinds that other
// network tools make (ip, brctl, vconfig, ethtool, a tun/tap daemon, a
// terminal). docs/security.md lists them (TestSecurityDocListsAllowlists).
//
// The filter sees an ioctl's request number, not the file it is made on:
// an interface request on a file that is not a socket is that file's
// driver's to refuse (ENOTTY), as without a filter.

// Ioctl is one ioctl request the filter lets through.
type Ioctl struct {
	Name string
	Cmd  uint32
}

// IoctlGroup is a kind of ioctl requests the filter lets through.
type IoctlGroup struct {
	Name  string // what the group is for, as docs/security.md names it
	Ioctl []Ioctl
}

// allowedIoctls are the ioctl requests the filter lets through, by kind.
// Not there, notably: the filesystem requests (FIFREEZE, FITHAW,
// FS_IOC_SHUTDOWN, FS_IOC_SETFSLABEL, FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR,
// FITRIM, ...) on whatever mount the file is on, the block and loop
// devices', TIOCSTI and TIOCLINUX (typing into, or driving, a terminal),
// TIOCCONS and TIOCSCTTY, a driver's or protocol's private requests
// (SIOCDEVPRIVATE, SIOCPROTOPRIVATE), SIOCSIFMAP (a card's I/O map),
// SIOCSMIIREG (a PHY's registers), SIOCWANDEV, and the namespace requests
// that lead out of the caller's view (NS_GET_PARENT, NS_GET_USERNS and the
// mount-namespace listing ones).
var allowedIoctls = []IoctlGroup{
	{"terminal and file basics", []Ioctl{
		{"TCGETS", unix.TCGETS}, {"TCSETS", unix.TCSETS}, {"TCSETSW", unix.TCSETSW}, {"TCSETSF", unix.TCSETSF},
		{"TCGETS2", unix.TCGETS2}, {"TCSETS2", unix.TCSETS2}, {"TCSETSW2", unix.TCSETSW2}, {"TCSETSF2", unix.TCSETSF2},
		{"TCSBRK", unix.TCSBRK}, {"TCXONC", unix.TCXONC}, {"TCFLSH", unix.TCFLSH},
		{"TIOCGWINSZ", unix.TIOCGWINSZ}, {"TIOCSWINSZ", unix.TIOCSWINSZ},
		{"TIOCGPGRP", unix.TIOCGPGRP}, {"TIOCSPGRP", unix.TIOCSPGRP}, {"TIOCGSID", unix.TIOCGSID},
		{"TIOCNOTTY", unix.TIOCNOTTY}, {"TIOCGPTN", unix.TIOCGPTN}, {"TIOCSPTLCK", unix.TIOCSPTLCK},
		{"TIOCGPTPEER", unix.TIOCGPTPEER}, {"TIOCOUTQ", unix.TIOCOUTQ},
		{"FIONREAD", unix.TIOCINQ}, {"FIONBIO", fionbio}, {"FIOCLEX", fioclex}, {"FIONCLEX", fionclex},
		{"FIOASYNC", fioasync},
	}},
	{"sockets", []Ioctl{
		{"SIOCATMARK", unix.SIOCATMARK}, {"SIOCGPGRP", unix.SIOCGPGRP}, {"SIOCSPGRP", unix.SIOCSPGRP},
		{"SIOCGSTAMP", unix.SIOCGSTAMP}, {"SIOCGSTAMPNS", unix.SIOCGSTAMPNS},
		{"SIOCGSTAMP_NEW", unix.SIOCGSTAMP_NEW}, {"SIOCGSTAMPNS_NEW", unix.SIOCGSTAMPNS_NEW},
		{"SIOCOUTQNSD", unix.SIOCOUTQNSD}, {"SIOCGSKNS", unix.SIOCGSKNS},
	}},
	{"interfaces, addresses, routes and ARP", []Ioctl{
		{"SIOCGIFNAME", unix.SIOCGIFNAME}, {"SIOCGIFINDEX", unix.SIOCGIFINDEX}, {"SIOCGIFCONF", unix.SIOCGIFCONF},
		{"SIOCGIFCOUNT", unix.SIOCGIFCOUNT}, {"SIOCSIFNAME", unix.SIOCSIFNAME},
		{"SIOCGIFFLAGS", unix.SIOCGIFFLAGS}, {"SIOCSIFFLAGS", unix.SIOCSIFFLAGS},
		{"SIOCGIFPFLAGS", unix.SIOCGIFPFLAGS}, {"SIOCSIFPFLAGS", unix.SIOCSIFPFLAGS},
		{"SIOCGIFADDR", unix.SIOCGIFADDR}, {"SIOCSIFADDR", unix.SIOCSIFADDR}, {"SIOCDIFADDR", unix.SIOCDIFADDR},
		{"SIOCGIFDSTADDR", unix.SIOCGIFDSTADDR}, {"SIOCSIFDSTADDR", unix.SIOCSIFDSTADDR},
		{"SIOCGIFBRDADDR", unix.SIOCGIFBRDADDR}, {"SIOCSIFBRDADDR", unix.SIOCSIFBRDADDR},
		{"SIOCGIFNETMASK", unix.SIOCGIFNETMASK}, {"SIOCSIFNETMASK", unix.SIOCSIFNETMASK},
		{"SIOCGIFMETRIC", unix.SIOCGIFMETRIC}, {"SIOCSIFMETRIC", unix.SIOCSIFMETRIC},
		{"SIOCGIFMTU", unix.SIOCGIFMTU}, {"SIOCSIFMTU", unix.SIOCSIFMTU},
		{"SIOCGIFHWADDR", unix.SIOCGIFHWADDR}, {"SIOCSIFHWADDR", unix.SIOCSIFHWADDR},
		{"SIOCSIFHWBROADCAST", unix.SIOCSIFHWBROADCAST},
		{"SIOCGIFENCAP", unix.SIOCGIFENCAP}, {"SIOCSIFENCAP", unix.SIOCSIFENCAP},
		{"SIOCGIFTXQLEN", unix.SIOCGIFTXQLEN}, {"SIOCSIFTXQLEN", unix.SIOCSIFTXQLEN},
		{"SIOCADDMULTI", unix.SIOCADDMULTI}, {"SIOCDELMULTI", unix.SIOCDELMULTI},
		{"SIOCSIFLINK", unix.SIOCSIFLINK}, {"SIOCGIFSLAVE", unix.SIOCGIFSLAVE}, {"SIOCSIFSLAVE", unix.SIOCSIFSLAVE},
		{"SIOCADDRT", unix.SIOCADDRT}, {"SIOCDELRT", unix.SIOCDELRT},
		{"SIOCGARP", unix.SIOCGARP}, {"SIOCSARP", unix.SIOCSARP}, {"SIOCDARP", unix.SIOCDARP},
		{"SIOCGMIIPHY", unix.SIOCGMIIPHY}, {"SIOCGMIIREG", unix.SIOCGMIIREG},
		{"SIOCGHWTSTAMP", unix.SIOCGHWTSTAMP}, {"SIOCSHWTSTAMP", unix.SIOCSHWTSTAMP},
	}},
	{"ethtool", []Ioctl{{"SIOCETHTOOL", unix.SIOCETHTOOL}}},
	{"bridges, VLANs and bonds", []Ioctl{
		{"SIOCBRADDBR", unix.SIOCBRADDBR}, {"SIOCBRDELBR", unix.SIOCBRDELBR},
		{"SIOCBRADDIF", unix.SIOCBRADDIF}, {"SIOCBRDELIF", unix.SIOCBRDELIF},
		{"SIOCGIFBR", unix.SIOCGIFBR}, {"SIOCSIFBR", unix.SIOCSIFBR},
		{"SIOCGIFVLAN", unix.SIOCGIFVLAN}, {"SIOCSIFVLAN", unix.SIOCSIFVLAN},
		{"SIOCBONDENSLAVE", unix.SIOCBONDENSLAVE}, {"SIOCBONDRELEASE", unix.SIOCBONDRELEASE},
		{"SIOCBONDSETHWADDR", unix.SIOCBONDSETHWADDR}, {"SIOCBONDSLAVEINFOQUERY", unix.SIOCBONDSLAVEINFOQUERY},
		{"SIOCBONDINFOQUERY", unix.SIOCBONDINFOQUERY}, {"SIOCBONDCHANGEACTIVE", unix.SIOCBONDCHANGEACTIVE},
	}},
	{"tun and tap", []Ioctl{
		{"TUNSETIFF", unix.TUNSETIFF}, {"TUNGETIFF", unix.TUNGETIFF}, {"TUNGETFEATURES", unix.TUNGETFEATURES},
		{"TUNSETPERSIST", unix.TUNSETPERSIST}, {"TUNSETOWNER", unix.TUNSETOWNER}, {"TUNSETGROUP", unix.TUNSETGROUP},
		{"TUNSETLINK", unix.TUNSETLINK}, {"TUNSETNOCSUM", unix.TUNSETNOCSUM}, {"TUNSETDEBUG", unix.TUNSETDEBUG},
		{"TUNSETOFFLOAD", unix.TUNSETOFFLOAD}, {"TUNSETTXFILTER", unix.TUNSETTXFILTER},
		{"TUNGETSNDBUF", unix.TUNGETSNDBUF}, {"TUNSETSNDBUF", unix.TUNSETSNDBUF},
		{"TUNATTACHFILTER", unix.TUNATTACHFILTER}, {"TUNDETACHFILTER", unix.TUNDETACHFILTER},
		{"TUNGETFILTER", unix.TUNGETFILTER},
		{"TUNGETVNETHDRSZ", unix.TUNGETVNETHDRSZ}, {"TUNSETVNETHDRSZ", unix.TUNSETVNETHDRSZ},
		{"TUNSETQUEUE", unix.TUNSETQUEUE}, {"TUNSETIFINDEX", unix.TUNSETIFINDEX},
		{"TUNSETVNETLE", unix.TUNSETVNETLE}, {"TUNGETVNETLE", unix.TUNGETVNETLE},
		{"TUNSETVNETBE", unix.TUNSETVNETBE}, {"TUNGETVNETBE", unix.TUNGETVNETBE},
		{"TUNSETSTEERINGEBPF", unix.TUNSETSTEERINGEBPF}, {"TUNSETFILTEREBPF", unix.TUNSETFILTEREBPF},
		{"TUNSETCARRIER", unix.TUNSETCARRIER}, {"TUNGETDEVNETNS", unix.TUNGETDEVNETNS},
	}},
	{"namespace queries", []Ioctl{{"NS_GET_NSTYPE", unix.NS_GET_NSTYPE}, {"NS_GET_OWNER_UID", unix.NS_GET_OWNER_UID}}},
}

// File requests of asm-generic/ioctls.h that x/sys/unix does not name
// (FIONREAD is TIOCINQ).
const (
	fionbio  = 0x5421
	fionclex = 0x5450
	fioclex  = 0x5451
	fioasync = 0x5452
)

// NetlinkFamily is a netlink protocol a plugin may open a socket of.
type NetlinkFamily struct {
	Name     string
	Protocol uint32
	Use      string
}

// allowedNetlink are the netlink families a plugin may open a socket of
// (socket(AF_NETLINK, type, protocol)): routing, netfilter, generic
// netlink (ethtool, wireguard, devlink, ...), XFRM and socket diagnostics.
// Not there, notably: NETLINK_KOBJECT_UEVENT (a uevent sent there is
// rebroadcast by the kernel as its own to udev and systemd, which load
// modules and start units on it), NETLINK_AUDIT, NETLINK_CONNECTOR (host
// process events among others), NETLINK_CRYPTO, NETLINK_SELINUX,
// NETLINK_ISCSI, NETLINK_SCSITRANSPORT, NETLINK_RDMA, NETLINK_USERSOCK.
var allowedNetlink = []NetlinkFamily{
	{"NETLINK_ROUTE", unix.NETLINK_ROUTE, "links, addresses, routes, rules, neighbours, qdiscs"},
	{"NETLINK_NETFILTER", unix.NETLINK_NETFILTER, "nftables, conntrack"},
	{"NETLINK_GENERIC", unix.NETLINK_GENERIC, "ethtool, wireguard, devlink and other network families"},
	{"NETLINK_XFRM", unix.NETLINK_XFRM, "IPsec policies and states"},
	{"NETLINK_SOCK_DIAG", unix.NETLINK_SOCK_DIAG, "socket lists (ss)"},
}

// AllowedIoctls returns the ioctl requests the filter lets through, by
// kind (see allowedIoctls): a copy, the filter's list is fixed.
func AllowedIoctls() []IoctlGroup {
	out := slices.Clone(allowedIoctls)
	for i := range out {
		out[i].Ioctl = slices.Clone(out[i].Ioctl)
	}
	return out
}

// AllowedNetlink returns the netlink families a plugin may open a socket
// of (see allowedNetlink): a copy, the filter's list is fixed.
func AllowedNetlink() []NetlinkFamily { return slices.Clone(allowedNetlink) }

// allowedIoctlCmds lists every allowed request number.
func allowedIoctlCmds() []uint32 {
	var out []uint32
	for _, g := range allowedIoctls {
		for _, c := range g.Ioctl {
			out = append(out, c.Cmd)
		}
	}
	return out
}

// allowedNetlinkProtocols lists every allowed netlink protocol.
func allowedNetlinkProtocols() []uint32 {
	var out []uint32
	for _, f := range allowedNetlink {
		out = append(out, f.Protocol)
	}
	return out
}
