package agent

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"
)

// Seccomp: every process of a plugin container runs under a filter that
// allows every system call but those that reach past the container. They
// fail with EPERM:
//
//   - the mount family (mount, umount2, fsopen, fsconfig, fsmount, fspick,
//     move_mount, open_tree, open_tree_attr, mount_setattr, pivot_root): a
//     fresh procfs or sysfs, a remount, a cgroup filesystem would undo every
//     read-only path and reach the host's cgroups;
//   - sethostname, setdomainname: the UTS namespace is the host's;
//   - keyctl, add_key, request_key: the keyrings are not namespaced;
//   - perf_event_open, syslog, swapon, swapoff, userfaultfd, acct,
//     quotactl, quotactl_fd, fanotify_init, lookup_dcookie, io_uring_setup,
//     io_uring_enter, io_uring_register: host-wide kernel state or a wide
//     kernel surface no network plugin uses (fanotify on a filesystem a
//     bind mount shares with the host could stall host processes; quotactl
//     could switch its quotas off);
//   - open_by_handle_at, the module calls, kexec_*, reboot, bpf, unless the
//     container holds the capability that is their purpose (the network's
//     allow_capabilities consented and the image asked for it);
//   - clone and unshare asking for a new user namespace.
//
// clone3 passes its flags in memory a filter cannot read, so it fails with
// ENOSYS and libc falls back to clone, whose flags the filter checks (as
// runc's and Docker's default profiles do). The one exception is the exec
// agent's own clone3, which starts each call's process straight into its
// cgroup: in the agent's filter clone3 is a user notification that kurmad
// answers, letting the agent's threads through and failing every other
// process's with ENOSYS (see SendListener and networkpod's clone3 gate).
//
// A network's allow_syscalls names denied calls it consents to (the same
// names, plus clone, unshare and clone3 to lift the user-namespace rule):
// they are then allowed. System calls of another ABI (32-bit x86, x32) kill
// the process: the filter checks numbers of the native ABI only.
//
// `kurma-agent exec` installs the filter on itself just before it executes
// the main executable, and `kurma-agent serve` before it serves; every call
// inherits it, so no plugin process runs a single instruction without it.
// It is built here rather than by libcontainer's configs.Seccomp, which
// needs libseccomp and cgo, and cannot give the agent a rule of its own.

// deniedSyscall is a system call the filter refuses.
type deniedSyscall struct {
	name string
	nr   uint32
	// cap is the capability whose holder may make the call, -1 for none.
	cap int
}

var deniedSyscalls = []deniedSyscall{
	{"mount", unix.SYS_MOUNT, -1},
	{"umount2", unix.SYS_UMOUNT2, -1},
	{"fsopen", unix.SYS_FSOPEN, -1},
	{"fsconfig", unix.SYS_FSCONFIG, -1},
	{"fsmount", unix.SYS_FSMOUNT, -1},
	{"fspick", unix.SYS_FSPICK, -1},
	{"move_mount", unix.SYS_MOVE_MOUNT, -1},
	{"open_tree", unix.SYS_OPEN_TREE, -1},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR, -1},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR, -1},
	{"pivot_root", unix.SYS_PIVOT_ROOT, -1},
	{"sethostname", unix.SYS_SETHOSTNAME, -1},
	{"setdomainname", unix.SYS_SETDOMAINNAME, -1},
	{"keyctl", unix.SYS_KEYCTL, -1},
	{"add_key", unix.SYS_ADD_KEY, -1},
	{"request_key", unix.SYS_REQUEST_KEY, -1},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, -1},
	{"syslog", unix.SYS_SYSLOG, -1},
	{"swapon", unix.SYS_SWAPON, -1},
	{"swapoff", unix.SYS_SWAPOFF, -1},
	{"userfaultfd", unix.SYS_USERFAULTFD, -1},
	{"acct", unix.SYS_ACCT, -1},
	{"quotactl", unix.SYS_QUOTACTL, -1},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD, -1},
	{"fanotify_init", unix.SYS_FANOTIFY_INIT, -1},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, -1},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP, -1},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER, -1},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER, -1},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, unix.CAP_DAC_READ_SEARCH},
	{"init_module", unix.SYS_INIT_MODULE, unix.CAP_SYS_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE, unix.CAP_SYS_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE, unix.CAP_SYS_MODULE},
	{"kexec_load", unix.SYS_KEXEC_LOAD, unix.CAP_SYS_BOOT},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, unix.CAP_SYS_BOOT},
	{"reboot", unix.SYS_REBOOT, unix.CAP_SYS_BOOT},
	// bpf only with the network's consent (allow_syscalls), whatever the
	// capabilities: CAP_SYS_ADMIN, which every plugin holds, would do for
	// most of it.
	{"bpf", unix.SYS_BPF, -1},
}

// newUserNSCalls are the calls refused when their flags (the first
// argument) ask for a new user namespace.
var newUserNSCalls = []deniedSyscall{
	{"clone", unix.SYS_CLONE, -1},
	{"unshare", unix.SYS_UNSHARE, -1},
}

// Names in allow_syscalls that lift a rule rather than a denied call:
// clone3's ENOSYS, the ioctl allowlist, the netlink family allowlist.
const (
	clone3Name = "clone3"
	ioctlName  = "ioctl"
	socketName = "socket"
)

// DeniedSyscalls lists the names allow_syscalls may consent to, in the
// filter's order.
func DeniedSyscalls() []string {
	var out []string
	for _, d := range deniedSyscalls {
		out = append(out, d.name)
	}
	for _, d := range newUserNSCalls {
		out = append(out, d.name)
	}
	return append(out, clone3Name, ioctlName, socketName)
}

// FilterOptions choose what a filter lets through beyond the default.
type FilterOptions struct {
	// Allow names denied system calls the network consents to
	// (allow_syscalls); an unknown name is an error.
	Allow []string
	// NotifyClone3 makes clone3 a user notification (the exec agent's
	// filter) instead of ENOSYS; InstallFilter then returns the listener
	// (unless Allow lets every clone3 through).
	NotifyClone3 bool
	// ThisThread installs the filter on the calling thread alone, which
	// must be locked to its goroutine and never return to the pool
	// (StartMainConfined), rather than on every thread.
	ThisThread bool
}

// nativeArch is the seccomp audit architecture of this build.
var nativeArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}

// x32Bit marks x32 system call numbers on amd64.
const x32Bit = 0x40000000

// InstallSeccomp installs the filter with no consent and no clone3
// notification on every thread of the calling process.
func InstallSeccomp() error {
	_, err := InstallFilter(FilterOptions{})
	return err
}

// InstallFilter installs the filter on every thread of the calling process:
// the denied system calls but those opts allows and those whose capability
// the process holds in its effective set. With opts.NotifyClone3 it returns
// the seccomp listener (close-on-exec) for kurmad to answer clone3 with,
// else -1.
func InstallFilter(opts FilterOptions) (listener int, err error) {
	arch, ok := nativeArch[runtime.GOARCH]
	if !ok {
		return -1, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
	}
	held, err := effectiveCaps()
	if err != nil {
		return -1, err
	}
	p, err := newPolicy(opts, held)
	if err != nil {
		return -1, err
	}
	prog := seccompProgram(arch, p)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// No PR_SET_NO_NEW_PRIVS: CAP_SYS_ADMIN (always held in a plugin
	// container) allows installing a filter without it, and setting it would
	// change what executing a setuid or file-capability binary does.
	// SPEC_ALLOW: the speculative store bypass mitigation kernels tie to
	// seccomp by default slows every plugin process and protects nothing
	// here (a plugin's secrets are its own).
	notify := p.clone3 == unix.SECCOMP_RET_USER_NOTIF
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW)
	if opts.ThisThread {
		if notify {
			return -1, errors.New("seccomp: a listener is for the whole process, not one thread")
		}
		flags = unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW
	}
	if notify {
		// TSYNC_ESRCH: TSYNC together with a listener (Linux 5.7).
		flags |= unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH
	}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return -1, fmt.Errorf("seccomp: install filter: %w", e)
	}
	if !notify {
		return -1, nil
	}
	return int(r), nil
}

// policy is what one filter refuses.
type policy struct {
	deny      []uint32 // EPERM
	newUserNS []uint32 // EPERM when the first argument has CLONE_NEWUSER
	// clone3 is clone3's action: ENOSYS, a user notification, or 0 when
	// clone3 is allowed.
	clone3 uint32
	// ioctls are the ioctl requests allowed (every other fails with
	// EPERM); nil: every request.
	ioctls []uint32
	// netlink are the netlink protocols a socket may be opened for (any
	// other fails with EPERM); nil: every protocol.
	netlink []uint32
}

// newPolicy turns opts and the held capabilities into what the filter
// refuses.
func newPolicy(opts FilterOptions, held uint64) (*policy, error) {
	known := DeniedSyscalls()
	for _, a := range opts.Allow {
		if !slices.Contains(known, a) {
			return nil, fmt.Errorf("seccomp: allow_syscalls names %q, which the filter does not deny (it denies %s)", a, strings.Join(known, ", "))
		}
	}
	p := &policy{}
	for _, d := range deniedSyscalls {
		if slices.Contains(opts.Allow, d.name) || (d.cap >= 0 && held&(1<<d.cap) != 0) {
			continue
		}
		p.deny = append(p.deny, d.nr)
	}
	for _, d := range newUserNSCalls {
		if !slices.Contains(opts.Allow, d.name) {
			p.newUserNS = append(p.newUserNS, d.nr)
		}
	}
	if !slices.Contains(opts.Allow, ioctlName) {
		p.ioctls = allowedIoctlCmds()
	}
	if !slices.Contains(opts.Allow, socketName) {
		p.netlink = allowedNetlinkProtocols()
	}
	switch {
	case slices.Contains(opts.Allow, clone3Name):
	case opts.NotifyClone3:
		p.clone3 = unix.SECCOMP_RET_USER_NOTIF
	default:
		p.clone3 = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	}
	return p, nil
}

// seccompProgram is the classic BPF filter: other ABIs killed, p's calls
// answered, everything else allowed.
func seccompProgram(arch uint32, p *policy) []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	const (
		offNr   = 0 // struct seccomp_data
		offArch = 4
		// The low half of args[0] (little-endian: both supported
		// architectures are); every clone flag this filter checks is
		// there.
		offArg0 = 16
		// The low halves of args[1] and args[2]: an ioctl's request and a
		// socket's protocol are ints (the kernel ignores the high half).
		offArg1 = 24
		offArg2 = 32
		ld      = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ret     = unix.BPF_RET | unix.BPF_K
		eperm   = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	killProcess := stmt(ret, unix.SECCOMP_RET_KILL_PROCESS)
	prog := []unix.SockFilter{
		stmt(ld, offArch),
		jeq(arch, 1, 0),
		killProcess,
		stmt(ld, offNr),
	}
	if arch == unix.AUDIT_ARCH_X86_64 {
		prog = append(prog,
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 0, Jf: 1, K: x32Bit},
			killProcess)
	}
	for _, nr := range p.deny {
		prog = append(prog, jeq(nr, 0, 1), stmt(ret, eperm))
	}
	if p.clone3 != 0 {
		prog = append(prog, jeq(unix.SYS_CLONE3, 0, 1), stmt(ret, p.clone3))
	}
	// Last: these load an argument over the system call number, and every
	// path after that load returns; a call of another number jumps over
	// them with the number still loaded.
	allowOnly := func(nr uint32, block []unix.SockFilter) {
		prog = append(prog, jeq(nr, 1, 0), stmt(unix.BPF_JMP|unix.BPF_JA, uint32(len(block))))
		prog = append(prog, block...)
	}
	allowed := func(vals []uint32) []unix.SockFilter {
		var out []unix.SockFilter
		for _, v := range vals {
			out = append(out, jeq(v, 0, 1), stmt(ret, unix.SECCOMP_RET_ALLOW))
		}
		return append(out, stmt(ret, eperm))
	}
	if p.ioctls != nil {
		allowOnly(unix.SYS_IOCTL, append([]unix.SockFilter{stmt(ld, offArg1)}, allowed(p.ioctls)...))
	}
	if p.netlink != nil {
		allowOnly(unix.SYS_SOCKET, append([]unix.SockFilter{
			stmt(ld, offArg0),
			jeq(unix.AF_NETLINK, 1, 0),
			stmt(ret, unix.SECCOMP_RET_ALLOW),
			stmt(ld, offArg2),
		}, allowed(p.netlink)...))
	}
	for _, nr := range p.newUserNS {
		prog = append(prog,
			jeq(nr, 0, 4),
			stmt(ld, offArg0),
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: 0, Jf: 1, K: unix.CLONE_NEWUSER},
			stmt(ret, eperm),
			stmt(ret, unix.SECCOMP_RET_ALLOW))
	}
	return append(prog, stmt(ret, unix.SECCOMP_RET_ALLOW))
}

// effectiveCaps is the calling thread's effective capability set as a bit
// mask.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("seccomp: capget: %w", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// SendListener hands the seccomp listener to kurmad over the unix socket
// sock (SCM_RIGHTS) and closes both: from then on only kurmad answers the
// filter's notifications. listener -1 sends nothing (kurmad reads the
// socket's end as "no listener").
func SendListener(sock, listener int) error {
	defer unix.Close(sock)
	if listener < 0 {
		return nil
	}
	defer unix.Close(listener)
	if err := unix.Sendmsg(sock, []byte{0}, unix.UnixRights(listener), nil, 0); err != nil {
		return fmt.Errorf("seccomp: hand the listener to kurmad: %w", err)
	}
	return nil
}

// Harden keeps the exec agent out of the plugins' reach, before it holds
// anything worth reaching (its cgroup, its seccomp listener). It makes the
// process undumpable, so that its memory, descriptors and /proc files need
// CAP_SYS_PTRACE, which no plugin holds. kurmad starts the agent with
// capabilities of its own, own (CAP_SYS_PTRACE among them: networkpod's
// agentOnlyCapabilities), so from its first instruction its capabilities
// are not a subset of a plugin's and the kernel refuses a plugin ptrace
// access to it even before this call; Harden then takes own out of what
// the agent's children get (its bounding, inheritable and ambient sets, on
// every thread), keeping them only in the agent's own permitted and
// effective sets. CAP_SETPCAP, which dropping from the bounding set needs,
// goes last. It must run in a process without cgo (AllThreadsSyscall).
func Harden(own []string) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_DUMPABLE: %w", err)
	}
	return dropCaps(own, syscall.AllThreadsSyscall6)
}

// DropThreadCaps takes caps out of the calling thread's bounding,
// inheritable and ambient sets, as Harden does for every thread: what a
// process the thread starts gets (StartMainConfined). The thread must be
// locked to its goroutine and never return to the pool.
func DropThreadCaps(caps []string) error {
	return dropCaps(caps, func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, syscall.Errno) {
		return syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	})
}

// dropCaps is Harden's and DropThreadCaps's work, each change made
// through call (on every thread, or on this one).
func dropCaps(own []string, call func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, syscall.Errno)) error {
	var caps []uintptr
	for _, name := range own {
		c, ok := capabilityNumber(name)
		if !ok {
			return fmt.Errorf("unknown capability %q", name)
		}
		caps = append(caps, c)
	}
	// Dropping from the bounding set needs CAP_SETPCAP: it goes last.
	slices.SortStableFunc(caps, func(a, b uintptr) int {
		return boolInt(a == unix.CAP_SETPCAP) - boolInt(b == unix.CAP_SETPCAP)
	})
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	inheritable := uint64(data[0].Inheritable) | uint64(data[1].Inheritable)<<32
	for _, c := range caps {
		inheritable &^= 1 << c
		// Every thread's sets are the process's until Harden changes
		// them: one not in this thread's ambient set is in none. Each
		// call on all threads stops them all, which a container's start
		// pays for each capability.
		if set, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, c, 0, 0); err == nil && set == 0 {
			continue
		}
		if _, _, e := call(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_LOWER, c, 0, 0, 0); e != 0 {
			return fmt.Errorf("drop capability %d from the ambient set: %w", c, e)
		}
	}
	data[0].Inheritable, data[1].Inheritable = uint32(inheritable), uint32(inheritable>>32)
	_, _, e := call(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0, 0, 0, 0)
	runtime.KeepAlive(&data)
	if e != 0 {
		return fmt.Errorf("drop the agent's own capabilities from the inheritable set: %w", e)
	}
	for _, c := range caps {
		inBounding, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if err != nil {
			return fmt.Errorf("PR_CAPBSET_READ: %w", err)
		}
		if inBounding == 1 {
			if _, _, e := call(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0, 0, 0, 0); e != 0 {
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, e)
			}
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// capabilityNumber is the number of the capability named as the kernel
// spells it ("CAP_SYS_PTRACE").
func capabilityNumber(name string) (uintptr, bool) {
	for _, c := range capability.ListKnown() {
		if "CAP_"+strings.ToUpper(c.String()) == name {
			return uintptr(c), true
		}
	}
	return 0, false
}
