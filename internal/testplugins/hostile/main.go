// Command hostile is a plugin for kurma's containment tests: installed as a
// plugin image's /opt/network/add, it attacks whatever the image's
// environment variable KURMA_HOSTILE names, with the add's arguments
// (<netns path> <pod uuid> <ifname>), and prints on stdout a JSON object
// mapping each attempt to its outcome ("ok" or the errno's name, e.g.
// "EPERM"), then exits 0:
//
//	plant     plant UUID-named entries in the netns dir (a symlink to
//	          /proc/1/ns/net, one to a host dir, a file) and replace the
//	          exec agent's socket in /.kurma with a listener of its own that
//	          answers every call with a forged result (left serving in a
//	          detached daemon)
//	escalate  the container escapes of the shocker/insmod kind:
//	          open_by_handle_at, init_module, finit_module, bpf, kexec_load,
//	          a write to /proc/sysrq-trigger and to /proc/sys/kernel, mknod
//	          of a disk; and what plugins need: /proc/sys/net and /dev/net/tun
//	escape    double-fork a child that calls setsid, then starts a
//	          grandchild that closes every fd and sleeps, and sleep itself;
//	          every process of it carries the pod uuid in its argv
//
// It must be static (CGO_ENABLED=0): it runs inside the plugin image.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// stageArg marks the re-executed processes of "escape" and of the forged
// agent of "plant" (argv[1]).
const (
	escapeChild      = "hostile-escape-child"
	escapeGrandchild = "hostile-escape-grandchild"
	forgedAgent      = "hostile-forged-agent"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case escapeChild:
			escapeChildMain()
			return
		case escapeGrandchild:
			time.Sleep(time.Hour)
			return
		case forgedAgent:
			forgedAgentMain()
			return
		}
	}
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: add <netns path> <pod uuid> [ifname]")
		os.Exit(2)
	}
	netns, pod := os.Args[1], os.Args[2]
	var report map[string]string
	switch attack := os.Getenv("KURMA_HOSTILE"); attack {
	case "plant":
		report = plant(filepath.Dir(netns))
	case "escalate":
		report = escalate()
	case "escape":
		escape(pod)
	default:
		fmt.Fprintf(os.Stderr, "hostile: unknown attack %q\n", attack)
		os.Exit(2)
	}
	_ = json.NewEncoder(os.Stdout).Encode(report)
}

// outcome names err's errno, or "ok".
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errnoName(errno)
	}
	return err.Error()
}

func errnoName(e syscall.Errno) string {
	names := map[syscall.Errno]string{
		syscall.EPERM: "EPERM", syscall.EACCES: "EACCES", syscall.EROFS: "EROFS", syscall.ENOENT: "ENOENT",
		syscall.ENOSYS: "ENOSYS", syscall.EINVAL: "EINVAL", syscall.EBADF: "EBADF", syscall.ENOEXEC: "ENOEXEC",
		syscall.EEXIST: "EEXIST", syscall.ENODEV: "ENODEV", syscall.EFAULT: "EFAULT", syscall.E2BIG: "E2BIG",
	}
	if n, ok := names[e]; ok {
		return n
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

// escape: see the package comment. The add sleeps holding its stdout, so
// the call can only end at its limit.
func escape(pod string) {
	self, _ := os.Executable()
	attr := &os.ProcAttr{Files: []*os.File{nil, nil, os.Stderr}}
	p, err := os.StartProcess(self, []string{self, escapeChild, pod}, attr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile escape:", err)
		os.Exit(1)
	}
	_, _ = p.Wait() // the child exits at once: its child is orphaned
	time.Sleep(time.Hour)
}

// escapeChildMain leaves the session, starts the grandchild with no open
// fd at all, and exits.
func escapeChildMain() {
	if _, err := syscall.Setsid(); err != nil {
		os.Exit(1)
	}
	self, _ := os.Executable()
	_, err := os.StartProcess(self, []string{self, escapeGrandchild, os.Args[2]}, &os.ProcAttr{})
	if err != nil {
		os.Exit(1)
	}
}
