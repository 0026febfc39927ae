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

	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// What a plugin container may do, beyond its own mount, PID and cgroup
// namespaces (docs/security.md, "The plugin container"). The
// seccomp filter is the agent's (agent.InstallFilter): it is keyed on the
// capabilities chosen here and the network's allow_syscalls.

// defaultCapabilities is the default capability set of every process in a
// plugin container (main, agent and every call), each for the plugin
// operations that need it, and nothing more (docs/security.md,
// "Capabilities"):
//
//   - CAP_NET_ADMIN: links, addresses, routes, rules, neighbours, qdiscs,
//     nftables and iptables rules, the net sysctls (every CNI plugin);
//   - CAP_NET_RAW: raw and packet sockets: the gratuitous ARP that bridge,
//     macvlan and ipvlan send for a new address, a DHCP client (the dhcp
//     plugin's daemon), iptables;
//   - CAP_NET_BIND_SERVICE: a plugin daemon's port below 1024 (the DHCP
//     client's 68);
//   - CAP_SYS_ADMIN: setns(2) into a pod's network namespace (every CNI
//     plugin does); the seccomp filter keeps the rest of what it allows,
//     mount(2) and the filesystem ioctls first, out of reach;
//   - CAP_DAC_OVERRIDE: the tuning plugin makes its backup dir
//     (/run/cni/tuning) with mode 0600 and then writes into it, which root
//     can only do by overriding the missing search bit.
//
// Not the rest of a usual container's set: no network plugin needs to
// override file ownership (CAP_FOWNER, CAP_CHOWN, CAP_FSETID: its files
// are root's), change identity
// (CAP_SETUID, CAP_SETGID), signal another user's processes (CAP_KILL: a
// plugin's processes are all root's), make device nodes (CAP_MKNOD),
// chroot or enter a mount namespace (CAP_SYS_CHROOT), change capability
// sets (CAP_SETPCAP), write audit records (CAP_AUDIT_WRITE), lift rlimits
// or make itself immune to the OOM killer (CAP_SYS_RESOURCE), lock memory
// past its rlimit (CAP_IPC_LOCK) or broadcast (CAP_NET_BROADCAST, which
// the kernel checks nowhere). Not CAP_SYS_PTRACE: no network plugin reads
// other processes' memory or namespaces (kurmad hands every plugin a netns
// by path), and without it a plugin cannot reach the exec agent (see
// agentOnlyCapabilities).
//
// An image may ask for any other capability and its network grant it
// (allow_capabilities; see grantedCapabilities). Among those,
// CAP_DAC_READ_SEARCH (open_by_handle_at reaches any file of the host by
// handle: kurmad's socket and journal, other containers' files),
// CAP_SYS_MODULE (kernel modules) and CAP_SYS_BOOT also open the system
// calls the seccomp filter otherwise denies; bpf(2) needs allow_syscalls.
var defaultCapabilities = []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BIND_SERVICE", "CAP_SYS_ADMIN", "CAP_DAC_OVERRIDE"}

// Capabilities returns the default capability set of every process in a
// plugin container (see defaultCapabilities): a copy, the set is fixed.
func Capabilities() []string { return slices.Clone(defaultCapabilities) }

// ErrCapabilityNotAllowed means a network's image asks for a capability the
// network's allow_capabilities does not list: the network does not start.
var ErrCapabilityNotAllowed = errors.New("capability not allowed by the network")

// requestedCapabilities are the capabilities img asks for.
func requestedCapabilities(img *gendef.Image) []string {
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
	set := append(Capabilities(), callOnlyCapabilities...)
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

// agentOnlyCapabilities are what the exec agent holds beyond its
// container's set, for itself alone (agent.Harden keeps them from its
// children):
//
//   - CAP_SYS_PTRACE: the kernel lets a process trace another, open its
//     /proc/<pid>/mem or fd entries, or take its descriptors (pidfd_getfd)
//     only when the target's permitted capabilities are a subset of its
//     own or it holds CAP_SYS_PTRACE: with this one more, and plugins
//     without it, no plugin can reach the agent from its very first
//     instruction, before the agent makes itself undumpable;
//   - CAP_SETPCAP: to take these out of its bounding set (agent.Harden);
//   - CAP_SYS_CHROOT: to enter a call's mount namespace (setns), in which
//     the call sees the network namespaces its arguments name and no
//     other (see callview.go).
var agentOnlyCapabilities = []string{"CAP_SYS_PTRACE", "CAP_SETPCAP", "CAP_SYS_CHROOT"}

// callOnlyCapabilities are held by every call and not by the main
// executable: CAP_WAKE_ALARM, a timer that wakes a suspended machine,
// which nothing on a server needs and no call is the worse for. The kernel
// lets a process reach another's /proc/<pid>/root, ns, fd and environ,
// take its descriptors or trace it only when its capabilities are a
// superset of the other's (or it holds CAP_SYS_PTRACE): so the main
// executable, lacking this one, reaches no call's processes, and through
// them no pod's namespace, however long a call runs (it sees the pods only
// when its network asks: main_sees_pods).
var callOnlyCapabilities = []string{"CAP_WAKE_ALARM"}

// mainDropped is what the main executable of a container whose set is
// caps lacks: callOnlyCapabilities, unless the image asked for one (then
// the main needs it too).
func mainDropped(spec Spec, caps []string) []string {
	var out []string
	for _, c := range callOnlyCapabilities {
		if slices.Contains(caps, c) && !slices.Contains(requestedCapabilities(spec.Image), c) {
			out = append(out, c)
		}
	}
	return out
}

// agentCapabilities is the exec agent's capability set, the container's
// caps plus agentOnlyCapabilities that kurmad has, and those of them the
// container's set lacks (for the agent to keep from its children).
func (h *Host) agentCapabilities(caps []string) (all, own []string) {
	all = slices.Clone(caps)
	have := h.kurmadCapabilities()
	for _, c := range agentOnlyCapabilities {
		if (have == nil || have[c]) && !slices.Contains(all, c) {
			all = append(all, c)
			own = append(own, c)
		}
	}
	return all, own
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

// bpfJITSysctls are the BPF JIT's host-wide knobs, under /proc/sys/net
// but no network's: bpf_jit_harden=0 or bpf_jit_kallsyms=1 weakens what
// stands between every eBPF program and the kernel. They are read-only
// unless the network consents to bpf(2) (allow_syscalls).
var bpfJITSysctls = []string{
	"/proc/sys/net/core/bpf_jit_enable", "/proc/sys/net/core/bpf_jit_harden",
	"/proc/sys/net/core/bpf_jit_kallsyms", "/proc/sys/net/core/bpf_jit_limit",
}

// readonlyPaths are runc's default read-only paths, with /proc/sys
// replaced by each of its entries but net (forwarding, rp_filter, bridge
// and neighbour sysctls are the plugins' business), and the BPF JIT's
// sysctls unless the network allows bpf. /sys is mounted read-only but
// for its network trees (see sysMounts).
func readonlyPaths(spec Spec) []string {
	var out []string
	if !slices.Contains(spec.AllowSyscalls, "bpf") {
		for _, p := range bpfJITSysctls {
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
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
