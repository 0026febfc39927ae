package networkpod

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/moby/sys/capability"
	devices "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// What a plugin container may do, beyond its own mount, PID and cgroup
// namespaces (docs/security.md, "The plugin container"). The
// seccomp filter is the agent's (agent.InstallFilter): it is keyed on the
// capabilities chosen here and the network's allow_syscalls.

// Capabilities is the default capability set of every process in a
// plugin container (main, agent and every add/del call). The plugins
// configure host and pod networking, so the set is wide, but it is
// explicit:
//
//   - CAP_NET_ADMIN, CAP_NET_RAW, CAP_NET_BIND_SERVICE, CAP_NET_BROADCAST:
//     links, addresses, routes, bridges, nftables/iptables, raw sockets
//     (DHCP, ARP announcements), privileged ports (e.g. a DHCP daemon);
//   - CAP_SYS_ADMIN: setns(2) into a pod's network namespace (every CNI
//     plugin does) and writing net sysctls under /proc/sys/net (the
//     seccomp filter keeps the rest of what it allows, mount(2) first, out
//     of reach);
//   - CAP_SYS_RESOURCE, CAP_IPC_LOCK: raising rlimits and locking memory
//     (large netlink buffers);
//   - CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_SETUID,
//     CAP_SETGID, CAP_SETPCAP, CAP_KILL, CAP_MKNOD, CAP_SYS_CHROOT,
//     CAP_AUDIT_WRITE: the usual root-in-a-container file, process and
//     identity operations.
//
// Not CAP_SYS_PTRACE: no network plugin reads other processes' memory or
// namespaces (kurmad hands every plugin a netns by path), and without it a
// plugin cannot reach the exec agent (see agentCapabilities).
//
// Not by default, but an image may ask for any other capability and the
// network grant it (allow_capabilities; see grantedCapabilities). Among
// those, CAP_DAC_READ_SEARCH (open_by_handle_at reaches any file of the
// host by handle: kurmad's socket and journal, other containers' files),
// CAP_SYS_MODULE (kernel modules), CAP_BPF (eBPF) and CAP_SYS_BOOT also
// open the system calls the seccomp filter otherwise denies.
var Capabilities = []string{
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_IPC_LOCK",
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_SETUID",
	"CAP_SETGID", "CAP_SETPCAP", "CAP_KILL", "CAP_MKNOD", "CAP_SYS_CHROOT",
	"CAP_AUDIT_WRITE",
}

// ErrCapabilityNotAllowed means a network's image asks for a capability the
// network's allow_capabilities does not list: the network does not start.
var ErrCapabilityNotAllowed = errors.New("capability not allowed by the network")

// requestedCapabilities are the capabilities img asks for.
func requestedCapabilities(img *imagefetch.Image) []string {
	out := slices.Clone(img.App.Capabilities)
	for _, c := range strings.Split(img.Labels[netplugin.CapabilitiesLabel], ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// grantedCapabilities is the capability set of a network's container: the
// default set plus what its image asks for, each extra one consented by the
// network, minus what kurmad itself lacks.
func (h *Host) grantedCapabilities(spec Spec) ([]string, error) {
	set := slices.Clone(Capabilities)
	var refused []string
	for _, c := range requestedCapabilities(spec.Image) {
		switch {
		case slices.Contains(set, c):
		case slices.Contains(spec.AllowCapabilities, c):
			set = append(set, c)
		default:
			refused = append(refused, c)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("image %s asks for %s: %w (add to the network's allow_capabilities to grant)",
			spec.Image.Name, strings.Join(refused, ", "), ErrCapabilityNotAllowed)
	}
	have := h.kurmadCapabilities()
	var out, missing []string
	for _, c := range set {
		if have == nil || have[c] {
			out = append(out, c)
		} else {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		h.log.WithField("network", spec.Network).WithField("capabilities", strings.Join(missing, ",")).
			Warn("kurmad lacks these capabilities, so the plugin container will too")
	}
	return out, nil
}

// agentCapability is what the exec agent holds beyond its container's set.
// The kernel lets a process trace another, open its /proc/<pid>/mem or fd
// entries, or take its descriptors (pidfd_getfd) only when the target's
// permitted capabilities are a subset of its own or it holds
// CAP_SYS_PTRACE: with this one more, and plugins without it, no plugin can
// reach the agent from its very first instruction, before the agent makes
// itself undumpable (agent.Harden, which also keeps it from the agent's
// children).
const agentCapability = "CAP_SYS_PTRACE"

// agentCapabilities is the exec agent's capability set: the container's
// plus agentCapability, when kurmad has it.
func (h *Host) agentCapabilities(caps []string) []string {
	out := slices.Clone(caps)
	if have := h.kurmadCapabilities(); (have == nil || have[agentCapability]) && !slices.Contains(out, agentCapability) {
		out = append(out, agentCapability)
	}
	return out
}

// kurmadCapabilities is kurmad's bounding set (a container cannot get more;
// libcontainer would fail), nil when it cannot be read.
func (h *Host) kurmadCapabilities() map[string]bool {
	h.capsOnce.Do(func() {
		c, err := capability.NewPid2(0)
		if err != nil || c.Load() != nil {
			return
		}
		h.caps = map[string]bool{}
		for _, cp := range capability.ListKnown() {
			if c.Get(capability.BOUNDING, cp) {
				h.caps["CAP_"+strings.ToUpper(cp.String())] = true
			}
		}
	})
	return h.caps
}

// readonlyPaths are runc's default read-only paths, with /proc/sys
// replaced by each of its entries but net (forwarding, rp_filter, bridge
// and neighbour sysctls are the plugins' business). /sys is mounted
// read-only but for its network trees (see sysMounts).
func readonlyPaths() []string {
	var out []string
	for _, p := range specconv.Example().Linux.ReadonlyPaths {
		if p != "/proc/sys" {
			out = append(out, p)
		}
	}
	entries, _ := os.ReadDir("/proc/sys")
	for _, e := range entries {
		if e.Name() != "net" {
			out = append(out, "/proc/sys/"+e.Name())
		}
	}
	return out
}

// writableSysPaths are the sysfs trees a network plugin writes (bridge and
// port settings, queues, a virtual link's attributes): the only writable
// parts of a plugin container's /sys. /sys/class/net holds symlinks into
// /sys/devices; a virtual link's target is under /sys/devices/virtual/net,
// a physical NIC's stays read-only.
var writableSysPaths = []string{"/sys/class/net", "/sys/devices/virtual/net"}

// sysMounts are /sys, read-only (CPUs, block devices, PCI, drivers, power,
// modules, uevent helper: the host's hardware and kernel), and the host's
// writableSysPaths bound over it writable. The container shares the host's
// network namespace, so its sysfs and the host's show the same links.
func sysMounts() []*configs.Mount {
	const flags = unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV
	out := []*configs.Mount{{Source: "sysfs", Destination: "/sys", Device: "sysfs", Flags: flags | unix.MS_RDONLY}}
	for _, p := range writableSysPaths {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue
		}
		out = append(out, &configs.Mount{Source: p, Destination: p, Device: "bind", Flags: flags | unix.MS_BIND})
	}
	return out
}

// maskedPaths are runc's defaults (/proc/kcore, /proc/keys, /proc/timer_list,
// /sys/firmware, ...) and what CAP_SYS_ADMIN, which every plugin holds,
// would open to host-wide state that no system call of the filter guards:
// /proc/mtrr (x86 memory type ranges: one write, or an ioctl even on a
// read-only descriptor, can make the host's RAM uncacheable), /proc/kmsg
// (the kernel log, the denied syslog call as a file, on kernels that still
// let CAP_SYS_ADMIN open it) and the power meters under
// /sys/devices/virtual/powercap (a side channel, masked by Docker too).
func maskedPaths() []string {
	return append(specconv.Example().Linux.MaskedPaths, "/proc/mtrr", "/proc/kmsg", "/sys/devices/virtual/powercap")
}

// tunDevice is /dev/net/tun (tap/tun-based plugins), created in /dev.
var tunDevice = &devices.Device{
	Path: "/dev/net/tun", FileMode: 0o666,
	Rule: devices.Rule{Type: devices.CharDevice, Major: 10, Minor: 200, Permissions: "rwm", Allow: true},
}

// containerDevices is runc's usual set (null, zero, full, random, urandom,
// tty, ptmx, pts) plus /dev/net/tun, without runc's "mknod any device"
// rules: a plugin cannot make a node for a disk.
func containerDevices() []*devices.Device {
	var out []*devices.Device
	for _, d := range specconv.AllowedDevices {
		if d.Major == devices.Wildcard || (d.Major == tunDevice.Major && d.Minor == tunDevice.Minor) {
			continue
		}
		out = append(out, d)
	}
	return append(out, tunDevice)
}

// deviceRules is the device cgroup's rules: deny everything, then allow the
// devices.
func deviceRules(devs []*devices.Device) []*devices.Rule {
	out := []*devices.Rule{{Type: devices.WildcardDevice, Major: devices.Wildcard, Minor: devices.Wildcard, Permissions: "rwm", Allow: false}}
	for _, d := range devs {
		r := d.Rule
		out = append(out, &r)
	}
	return out
}
