package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// escalate tries what no network plugin needs and a container escape
// does, and what plugins do need, and reports every outcome.
func escalate() map[string]string {
	r := map[string]string{
		"open_by_handle_at": outcome(openByHandle()),
		"init_module":       outcome(syscallErr(unix.SYS_INIT_MODULE, 0, 0, 0)),
		"finit_module":      outcome(syscallErr(unix.SYS_FINIT_MODULE, ^uintptr(0), 0, 0)),
		"delete_module":     outcome(syscallErr(unix.SYS_DELETE_MODULE, 0, 0, 0)),
		"kexec_load":        outcome(syscallErr(unix.SYS_KEXEC_LOAD, 0, 0, 0)),
		"bpf":               outcome(syscallErr(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0)),
		// Not "b": should containment ever regress, the machine running
		// the test must not reboot. Any key is denied the same way.
		"sysrq-trigger":         outcome(writeFile("/proc/sysrq-trigger", "h")),
		"/proc/sys/kernel":      outcome(rewrite("/proc/sys/kernel/printk_ratelimit")),
		"/proc/sys/net":         outcome(rewrite("/proc/sys/net/ipv4/ip_forward")),
		"mknod disk":            outcome(mknodDisk()),
		"/dev/net/tun":          outcome(openTun()),
		"read /proc/timer_list": readOutcome("/proc/timer_list"),
		"CAP_DAC_READ_SEARCH":   capOutcome(unix.CAP_DAC_READ_SEARCH),
		"CAP_SYS_MODULE":        capOutcome(unix.CAP_SYS_MODULE),
		"CAP_NET_ADMIN":         capOutcome(unix.CAP_NET_ADMIN),
	}
	return r
}

func syscallErr(nr, a1, a2, a3 uintptr) error {
	if _, _, e := unix.Syscall(nr, a1, a2, a3); e != 0 {
		return e
	}
	return nil
}

// openByHandle is the "shocker" escape's second step: open a file by a
// handle (there, brute-forced handles of the host's files). The handle is
// one of /dev (tmpfs) when the kernel gives one, else a made-up one: what
// is denied is the call.
func openByHandle() error {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/dev", 0)
	if err != nil {
		h = unix.NewFileHandle(1, make([]byte, 8))
	}
	mfd, err := unix.Open("/dev", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	fd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func writeFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(data)
	return err
}

// rewrite writes a sysctl's own value back: a write that changes nothing.
func rewrite(path string) error {
	v, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return writeFile(path, string(v))
}

// mknodDisk makes (and removes) a node for the first SCSI disk, 8:0.
func mknodDisk() error {
	const p = "/dev/kt-hostile-sda"
	err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0)))
	if err == nil {
		_ = os.Remove(p)
	}
	return err
}

func openTun() error {
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err == nil {
		f.Close()
	}
	return err
}

// readOutcome is "empty" for a masked file, "data" for one with content.
func readOutcome(path string) string {
	b, err := os.ReadFile(path)
	switch {
	case err != nil:
		return outcome(err)
	case len(b) == 0:
		return "empty"
	}
	return "data"
}

// capOutcome is "held" or "not held" for a capability in the effective set.
func capOutcome(c uintptr) string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return outcome(err)
	}
	if (uint64(data[0].Effective)|uint64(data[1].Effective)<<32)&(1<<c) != 0 {
		return "held"
	}
	return "not held"
}
