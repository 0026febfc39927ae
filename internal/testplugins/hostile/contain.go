package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// contain tries every route out of a plugin container that kurma's
// containment must close, and a few that plugins need and must keep. No
// attempt changes anything on the host even if it succeeds: hostname and
// domainname are set to their current values, a sysfs or sysctl knob is
// only opened for writing (never written), a module, kexec image or swap
// file does not exist, reboot gets an invalid magic, and clone, clone3 and
// unshare get flags the kernel rejects once past the filter (EINVAL
// instead of a new user namespace). Outcomes are errno names or "ok"; for
// a call whose arguments the kernel refuses, the filter's answer (EPERM,
// ENOSYS) tells the filter spoke, the kernel's (EINVAL, ENOENT, EFAULT,
// EBADF) that the call passed it.
func contain() map[string]string {
	r := map[string]string{}
	tmp, _ := os.MkdirTemp("", "hostile")
	defer os.RemoveAll(tmp)

	// The mount family: a procfs of its own (then /proc/sys/kernel is
	// writable: domainname, core_pattern), a remount of the read-only
	// /proc/sys, a cgroup filesystem, sysfs again.
	r["mount proc"] = outcome(unix.Mount("proc", tmp, "proc", 0, ""))
	if r["mount proc"] == "ok" {
		r["write domainname through a new procfs"] = outcome(rewrite(filepath.Join(tmp, "sys/kernel/domainname")))
		_ = unix.Unmount(tmp, unix.MNT_DETACH)
	}
	r["remount /proc/sys/kernel rw"] = outcome(unix.Mount("", "/proc/sys/kernel", "", unix.MS_REMOUNT|unix.MS_BIND, ""))
	r["mount cgroup2"] = outcome(unix.Mount("none", tmp, "cgroup2", 0, ""))
	r["mount sysfs"] = outcome(unix.Mount("sysfs", tmp, "sysfs", 0, ""))
	r["umount2 /proc/sys"] = outcome(unix.Unmount("/proc/sys", unix.MNT_DETACH))
	r["pivot_root"] = outcome(unix.PivotRoot(tmp, tmp))
	r["fsopen cgroup2"] = fdOutcome(unix.Fsopen("cgroup2", unix.FSOPEN_CLOEXEC))
	r["fspick /proc"] = fdOutcome(unix.Fspick(unix.AT_FDCWD, "/proc", fspickCloexec))
	r["open_tree /proc"] = fdOutcome(unix.OpenTree(unix.AT_FDCWD, "/proc", unix.OPEN_TREE_CLONE|unix.O_CLOEXEC))
	r["open_tree_attr /proc"] = outcome(rawErr(unix.SYS_OPEN_TREE_ATTR, ^uintptr(0), 0, 0)) // EBADF past the filter
	r["move_mount"] = outcome(unix.MoveMount(-1, "", -1, "", 0))                            // EBADF past it
	r["mount_setattr"] = outcome(rawErr(unix.SYS_MOUNT_SETATTR, ^uintptr(0), 0, 0))         // EBADF/EINVAL past it
	r["fsconfig"] = outcome(rawErr(unix.SYS_FSCONFIG, ^uintptr(0), 0, 0))                   // EBADF past it
	r["fsmount"] = outcome(rawErr(unix.SYS_FSMOUNT, ^uintptr(0), 0, 0))                     // EBADF past it

	// The host's UTS namespace, set to what it already is.
	if host, err := os.ReadFile("/proc/sys/kernel/hostname"); err == nil {
		r["sethostname"] = outcome(unix.Sethostname(bytes.TrimSpace(host)))
	}
	if dom, err := os.ReadFile("/proc/sys/kernel/domainname"); err == nil {
		r["setdomainname"] = outcome(unix.Setdomainname(bytes.TrimSpace(dom)))
	}
	r["open /proc/sys/kernel/hostname for writing"] = outcome(openWrite("/proc/sys/kernel/hostname"))
	r["open /proc/sys/kernel/core_pattern for writing"] = outcome(openWrite("/proc/sys/kernel/core_pattern"))

	// Keyrings, perf, the kernel log, swap, userfaultfd, accounting,
	// quotas, fanotify, io_uring, user namespaces.
	r["keyctl"] = outcome(rawErr(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(neg(unix.KEY_SPEC_SESSION_KEYRING)), 0))
	r["add_key"] = outcome(rawErr(unix.SYS_ADD_KEY, 0, 0, 0))         // EFAULT past the filter
	r["request_key"] = outcome(rawErr(unix.SYS_REQUEST_KEY, 0, 0, 0)) // EFAULT past it
	r["perf_event_open"] = outcome(rawErr6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0))
	r["syslog"] = outcome(rawErr(unix.SYS_SYSLOG, unix.SYSLOG_ACTION_SIZE_BUFFER, 0, 0))
	r["swapon"] = outcome(rawErr(unix.SYS_SWAPON, uintptr(unsafe.Pointer(cstr("/nonexistent-swap"))), 0, 0)) // ENOENT past it
	r["swapoff"] = outcome(rawErr(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(cstr("/nonexistent-swap"))), 0, 0))
	r["userfaultfd"] = fdOutcome(rawRet(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|uffdUserModeOnly, 0, 0))
	r["acct"] = outcome(rawErr(unix.SYS_ACCT, 0, 0, 0))
	r["quotactl_fd"] = outcome(rawErr6(unix.SYS_QUOTACTL_FD, ^uintptr(0), 0, 0, 0, 0, 0)) // EBADF past it
	r["fanotify_init"] = fdOutcome(unix.FanotifyInit(unix.FAN_CLOEXEC, 0))
	r["io_uring_setup"] = outcome(rawErr(unix.SYS_IO_URING_SETUP, 0, 0, 0)) // EINVAL/EFAULT past it
	r["reboot"] = outcome(rawErr6(unix.SYS_REBOOT, 0, 0, 0, 0, 0, 0))       // bad magic: EINVAL past it
	r["kexec_file_load"] = outcome(rawErr6(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0, 0))
	// CLONE_FS with CLONE_NEWUSER is EINVAL; unshare(CLONE_NEWUSER) in a
	// multi-threaded process too; clone3 with size 0 too.
	r["clone CLONE_NEWUSER"] = outcome(rawErr6(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0))
	r["unshare CLONE_NEWUSER"] = outcome(unix.Unshare(unix.CLONE_NEWUSER))
	r["clone3"] = outcome(rawErr(unix.SYS_CLONE3, 0, 0, 0))
	r["clone (no new namespace)"] = cloneOutcome()

	// Read-only /sys but the network trees; never written, only opened.
	for _, p := range []string{
		"/sys/devices/system/cpu/cpu0/online", "/sys/devices/system/cpu/cpu1/online", "/sys/kernel/uevent_helper", "/sys/power/state",
		"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/bus/pci/rescan", "/sys/block",
	} {
		if _, err := os.Stat(p); err == nil {
			r["open "+p+" for writing"] = outcome(openWrite(p))
		}
	}
	// Files CAP_SYS_ADMIN, which every plugin holds, opens to host-wide
	// state no system call of the filter guards: the kernel log (the
	// syslog call, as a file; reading it takes messages from the host's
	// logger), x86 memory type ranges (a write, or an ioctl even on a
	// read-only descriptor, can make the host's RAM uncacheable), and the
	// power meters (a side channel). Only opened and looked at, never
	// read or written.
	for _, p := range []string{"/proc/kmsg", "/proc/mtrr", "/sys/devices/virtual/powercap"} {
		if _, err := os.Stat(p); err == nil {
			r["open "+p] = maskOutcome(p)
		}
	}
	// The host's System V IPC objects (shared memory, semaphores, message
	// queues: CAP_SYS_ADMIN may remove or reconfigure any of them, and a
	// root-owned segment is root's to attach): only counted, never touched.
	r["host SysV IPC objects visible"] = sysvIPCOutcome()
	r["create in /sys/fs/cgroup"] = outcome(os.WriteFile("/sys/fs/cgroup/cgroup.procs", nil, 0o644))
	r["open /sys/class/net/lo/tx_queue_len for writing"] = outcome(openWrite("/sys/class/net/lo/tx_queue_len"))
	r["open /sys/devices/virtual/net/lo/mtu for writing"] = outcome(openWrite("/sys/devices/virtual/net/lo/mtu"))
	// A device's uevent file: a write makes the kernel send udev a uevent
	// of the plugin's choosing. Only opened, never written.
	r["open /sys/devices/virtual/net/lo/uevent for writing"] = outcome(openWrite("/sys/devices/virtual/net/lo/uevent"))
	r["open /sys/class/net/lo/uevent for writing"] = outcome(openWrite("/sys/class/net/lo/uevent"))

	// The exec agent: its memory, descriptors, namespaces, and the
	// cgroup directories it holds.
	for k, v := range attackAgent() {
		r[k] = v
	}
	r["cgroup"] = ownCgroup()
	r["CAP_SYS_PTRACE"] = capOutcome(unix.CAP_SYS_PTRACE)
	return r
}

// maskOutcome opens p read-only and says "masked" when it is what runc
// masks a path with (/dev/null over a file, an empty read-only tmpfs over
// a directory), "reachable" when it is the real thing, or the errno.
func maskOutcome(p string) string {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return outcome(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return outcome(err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return outcome(err)
	}
	devNull := st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
	if devNull || (st.Mode&unix.S_IFMT == unix.S_IFDIR && fs.Type == unix.TMPFS_MAGIC) {
		return "masked"
	}
	return "reachable"
}

// sysvIPCOutcome counts the System V IPC objects listed in /proc/sysvipc
// (those of the reader's IPC namespace).
func sysvIPCOutcome() string {
	n := 0
	for _, kind := range []string{"shm", "sem", "msg"} {
		b, err := os.ReadFile("/proc/sysvipc/" + kind)
		if err != nil {
			return outcome(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		n += len(lines) - 1 // the header line
	}
	return strconv.Itoa(n)
}

// agentPid finds the exec agent (`/.kurma-agent serve`) in the container.
func agentPid() int {
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.HasPrefix(cmd, []byte("/.kurma-agent\x00serve\x00")) {
			return pid
		}
	}
	return 0
}

// attackAgent tries to reach the agent's memory, descriptors and cgroup
// directories (the one that escaped: `echo $$ >
// /proc/<agent>/fd/4/../../cgroup.procs`).
func attackAgent() map[string]string {
	r := map[string]string{}
	pid := agentPid()
	if pid == 0 {
		r["agent"] = "not found"
		return r
	}
	ap := fmt.Sprintf("/proc/%d", pid)
	r["open agent mem"] = outcome(openClose(ap+"/mem", os.O_RDWR))
	r["readlink agent fds"] = outcome(readlinkFds(ap + "/fd"))
	r["open agent ns/mnt"] = outcome(openClose(ap+"/ns/mnt", os.O_RDONLY))
	r["open agent root"] = outcome(openClose(ap+"/root/", os.O_RDONLY))
	r["ptrace agent"] = outcome(ptraceSeize(pid))
	r["pidfd_getfd agent"] = outcome(pidfdGetfd(pid))
	buf := make([]byte, 8)
	local := []unix.Iovec{{Base: &buf[0], Len: 8}}
	remote := []unix.RemoteIovec{{Base: 0x400000, Len: 8}}
	_, err := unix.ProcessVMReadv(pid, local, remote, 0)
	r["process_vm_readv agent"] = outcome(err)
	self := []byte(strconv.Itoa(os.Getpid()))
	worst := ""
	for fd := 0; fd < 64; fd++ {
		for _, rel := range []string{"cgroup.procs", "../cgroup.procs", "../../cgroup.procs"} {
			o := outcome(appendTo(fmt.Sprintf("%s/fd/%d/%s", ap, fd, rel), self))
			if o == "ok" || worst == "" || worst == "ENOENT" {
				worst = o
			}
		}
	}
	r["join a cgroup through the agent's fds"] = worst
	return r
}

// raceAgent, in the main executable, waits for the agent to start and
// attacks it as early as it can, again and again for a while: the agent
// must be out of reach from its first instruction, not just once it has
// set itself up.
func raceAgent(d time.Duration) map[string]string {
	deadline := time.Now().Add(d)
	var pid int
	for pid == 0 && time.Now().Before(deadline) {
		pid = agentPid()
	}
	r := map[string]string{}
	if pid == 0 {
		r["agent"] = "not found"
		return r
	}
	ap := fmt.Sprintf("/proc/%d", pid)
	tries := 0
	for end := time.Now().Add(d); time.Now().Before(end); tries++ {
		for k, err := range map[string]error{
			"race: open agent mem":    openClose(ap+"/mem", os.O_RDWR),
			"race: ptrace agent":      ptraceSeize(pid),
			"race: pidfd_getfd agent": pidfdGetfd(pid),
			"race: open agent fd/3":   openClose(ap+"/fd/3", os.O_RDONLY),
			"race: open agent fd/4":   openClose(ap+"/fd/4", os.O_RDONLY),
		} {
			if o := outcome(err); r[k] != "ok" && o != "ESRCH" && o != "ENOENT" {
				r[k] = o
			}
		}
	}
	r["race: tries"] = strconv.Itoa(tries)
	return r
}

// ownCgroup is the cgroup v2 path of the process as it sees it.
func ownCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return outcome(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "0::") {
			return strings.TrimPrefix(l, "0::")
		}
	}
	return "none"
}

func ptraceSeize(pid int) error {
	err := rawErr6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0)
	if err == nil {
		_ = rawErr6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
	}
	return err
}

func pidfdGetfd(pid int) error {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, 3, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// cloneOutcome forks the way Go does (clone, no new namespace): what
// plugins do all the time must keep working.
func cloneOutcome() string {
	self, _ := os.Executable()
	p, err := os.StartProcess(self, []string{self, exitChild}, &os.ProcAttr{})
	if err != nil {
		return outcome(err)
	}
	st, err := p.Wait()
	if err != nil {
		return outcome(err)
	}
	if !st.Success() {
		return st.String()
	}
	return "ok"
}

// readlinkFds reads where each descriptor in dir (a /proc/<pid>/fd) leads:
// nil only when at least one could be read.
func readlinkFds(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	err = unix.ENOENT
	for _, e := range entries {
		if _, err = os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			return nil
		}
	}
	return err
}

func openWrite(p string) error { return openClose(p, os.O_WRONLY) }

func openClose(p string, flag int) error {
	f, err := os.OpenFile(p, flag, 0)
	if err == nil {
		f.Close()
	}
	return err
}

func appendTo(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(data)
	return err
}

func fdOutcome(fd int, err error) string {
	if err == nil {
		unix.Close(fd)
	}
	return outcome(err)
}

func rawRet(nr, a1, a2, a3 uintptr) (int, error) {
	r, _, e := unix.Syscall(nr, a1, a2, a3)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func rawErr(nr, a1, a2, a3 uintptr) error {
	_, err := rawRet(nr, a1, a2, a3)
	return err
}

func rawErr6(nr, a1, a2, a3, a4, a5, a6 uintptr) error {
	if _, _, e := unix.Syscall6(nr, a1, a2, a3, a4, a5, a6); e != 0 {
		return e
	}
	return nil
}

func cstr(s string) *byte {
	p, _ := unix.BytePtrFromString(s)
	return p
}

// neg is v as the kernel reads a negative int argument.
func neg(v int) uint32 { return uint32(int32(v)) }

// Flags x/sys/unix does not name.
const (
	fspickCloexec    = 0x1 // FSPICK_CLOEXEC
	uffdUserModeOnly = 0x1 // UFFD_USER_MODE_ONLY
)
