package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Filesystem ioctls the seccomp filter must refuse through any mount
// (x/sys/unix names few of them). Each is tried with arguments that make
// it harmless should it ever pass: FITHAW of a filesystem that is not
// frozen is EINVAL, the others get a NULL argument (EFAULT).
const (
	fifreeze         = 0xc0045877 // _IOWR('X', 119, int)
	fithaw           = 0xc0045878 // _IOWR('X', 120, int)
	fsIocShutdown    = 0x8004587d // _IOR('X', 125, __u32)
	fsIocSetFSLabel  = 0x41009432 // _IOW(0x94, 50, char[256])
	fsIocFSSetXattr  = 0x401c5820 // _IOW('X', 32, struct fsxattr)
	netlinkAudit     = 9
	netlinkConnector = 11
)

// wall tries what the allowlists and the trimmed capabilities refuse, and
// what plugins keep, and says what the process sees of the pods' netns
// dir:
//
//   - the filesystem ioctls through every mount of the container (the
//     host's root through the agent's and /lib/modules' binds, the state
//     dir's filesystem, the netns dir and a pod's netns file), each beside
//     a TCGETS that passes the filter (ENOTTY: no terminal), and FIFREEZE
//     itself on the container's own /tmp;
//   - a socket of each refused netlink family, and of each allowed one;
//   - the BPF JIT sysctls, opened for writing only;
//   - the capabilities no longer granted, lowering oom_score_adj (the OOM
//     killer's immunity) and raising a hard rlimit.
func wall(netnsDir string) map[string]string {
	r := map[string]string{}
	mounts := []string{"/", "/var/lib/cni", "/.kurma-agent", "/lib/modules", "/proc", "/sys", "/sys/class/net",
		"/dev", "/dev/pts", "/dev/shm", "/tmp", "/run", "/dev/null"}
	if netnsDir != "" {
		mounts = append(mounts, netnsDir)
		if entries, err := os.ReadDir(netnsDir); err == nil && len(entries) > 0 {
			mounts = append(mounts, filepath.Join(netnsDir, entries[0].Name()))
		}
	}
	for _, m := range mounts {
		fd, err := unix.Open(m, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			r["open "+m] = outcome(err)
			continue
		}
		r["TCGETS via "+m] = outcome(ioctlErr(fd, unix.TCGETS, 0))
		r["FITHAW via "+m] = outcome(ioctlErr(fd, fithaw, 0))
		r["FS_IOC_SHUTDOWN via "+m] = outcome(ioctlErr(fd, fsIocShutdown, 0))
		r["FS_IOC_SETFSLABEL via "+m] = outcome(ioctlErr(fd, fsIocSetFSLabel, 0))
		r["FS_IOC_FSSETXATTR via "+m] = outcome(ioctlErr(fd, fsIocFSSetXattr, 0))
		unix.Close(fd)
	}
	// FIFREEZE for real, on the container's own tmpfs: should it pass, it
	// freezes only that, and is thawed at once.
	if fd, err := unix.Open("/tmp", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		r["FIFREEZE via /tmp"] = outcome(ioctlErr(fd, fifreeze, 0))
		if r["FIFREEZE via /tmp"] == "ok" {
			_ = ioctlErr(fd, fithaw, 0)
		}
		unix.Close(fd)
	}
	for name, proto := range map[string]int{
		"NETLINK_KOBJECT_UEVENT": unix.NETLINK_KOBJECT_UEVENT, "NETLINK_AUDIT": netlinkAudit,
		"NETLINK_CONNECTOR": netlinkConnector, "NETLINK_CRYPTO": unix.NETLINK_CRYPTO,
		"NETLINK_SELINUX": unix.NETLINK_SELINUX, "NETLINK_ISCSI": unix.NETLINK_ISCSI,
		"NETLINK_SCSITRANSPORT": unix.NETLINK_SCSITRANSPORT, "NETLINK_RDMA": unix.NETLINK_RDMA,
		"NETLINK_USERSOCK": unix.NETLINK_USERSOCK, "NETLINK_FIB_LOOKUP": unix.NETLINK_FIB_LOOKUP,
		"NETLINK_ROUTE": unix.NETLINK_ROUTE, "NETLINK_NETFILTER": unix.NETLINK_NETFILTER,
		"NETLINK_GENERIC": unix.NETLINK_GENERIC, "NETLINK_XFRM": unix.NETLINK_XFRM,
		"NETLINK_SOCK_DIAG": unix.NETLINK_SOCK_DIAG,
	} {
		// Never sent on: a uevent or an audit record would reach the host.
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err == nil {
			unix.Close(fd)
		}
		r["socket "+name] = outcome(err)
	}
	for _, p := range []string{"bpf_jit_enable", "bpf_jit_harden", "bpf_jit_kallsyms", "bpf_jit_limit"} {
		r["open /proc/sys/net/core/"+p+" for writing"] = outcome(openWrite("/proc/sys/net/core/" + p))
	}
	for name, c := range map[string]uintptr{
		"CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE,
		"CAP_IPC_LOCK": unix.CAP_IPC_LOCK, "CAP_MKNOD": unix.CAP_MKNOD, "CAP_SETUID": unix.CAP_SETUID,
		"CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN,
	} {
		r[name] = capOutcome(c)
	}
	r["lower oom_score_adj"] = outcome(os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0))
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		lim.Max++
		r["raise RLIMIT_NOFILE"] = outcome(unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))
	}
	buf := make([]byte, 64<<20)
	r["mlock 64 MiB"] = outcome(unix.Mlock(buf))
	_ = unix.Munlock(buf)
	r["netns dir"] = netnsEntries(netnsDir)
	return r
}

// netnsEntries lists the netns dir's entries, comma-separated.
func netnsEntries(dir string) string {
	if dir == "" {
		return "(none given)"
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return outcome(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func ioctlErr(fd int, cmd, arg uintptr) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, arg); e != 0 {
		return e
	}
	return nil
}

// bounds runs into each of the container's bounds and reports where:
// how many processes the call could start, how much it could write to
// /tmp, /run, /dev/shm, its writable layer and its state dir (each file
// removed after).
func bounds() map[string]string {
	r := map[string]string{}
	n, err := forkUntilRefused()
	r["processes started"] = fmt.Sprint(n)
	r["fork"] = outcome(err)
	for _, dir := range []string{"/tmp", "/run", "/dev/shm", "/", "/var/lib/cni"} {
		mib, err := fill(filepath.Join(dir, "hostile-fill"))
		r["fill "+dir] = fmt.Sprintf("%s after %d MiB", outcome(err), mib)
	}
	return r
}

// forkUntilRefused starts sleeping children until a start fails, then
// kills them.
func forkUntilRefused() (int, error) {
	self, _ := os.Executable()
	var procs []*os.Process
	defer func() {
		for _, p := range procs {
			_ = p.Kill()
			_, _ = p.Wait()
		}
	}()
	for len(procs) < 4096 {
		p, err := os.StartProcess(self, []string{self, sleepStage}, &os.ProcAttr{})
		if err != nil {
			return len(procs), err
		}
		procs = append(procs, p)
	}
	return len(procs), nil
}

// fill writes 1 MiB at a time to path until a write fails (or 4 GiB),
// then removes it.
func fill(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for mib := 0; mib < 4096; mib++ {
		if _, err := f.Write(chunk); err != nil {
			return mib, err
		}
	}
	return 4096, nil
}

// hog touches memory 16 MiB at a time until it is killed (the OOM killer
// at its call's memory limit), or 8 GiB.
func hog() {
	var keep [][]byte
	for range 512 {
		b := make([]byte, 16<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	fmt.Fprintf(os.Stderr, "hostile: %d MiB touched and still alive\n", 16*len(keep))
	time.Sleep(time.Hour)
	runtime.KeepAlive(keep)
}

// sleepStage is a child of bounds that waits to be killed.
func sleepMain() {
	syscall.Pause()
}
