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
//	          every process of it carries the pod uuid in its argv, and
//	          each first tries every route out of its cgroup (a cgroup
//	          filesystem, the agent's descriptors)
//	contain   every route out of the container the containment must close
//	          (see contain), and what plugins need from the same places
//	wall      what the allowlists (ioctl requests through every mount,
//	          netlink families) and the trimmed capabilities refuse, the
//	          BPF JIT sysctls, and what the call sees of the netns dir
//	bounds    fork until refused, fill /tmp, /run, /dev/shm, the writable
//	          layer and the state dir until full (see bounds)
//	memory    touch memory until killed
//	peek      the add enters its pod and waits for the main executable,
//	          which reaches for the pod through the add's /proc (see peekMain)
//	reach     connect to a host daemon's abstract unix socket and a host's TCP
//	          port (both on stdin)
//	sockdestroy close a host's TCP connection with sock_diag's SOCK_DESTROY
//	          (the connection on stdin)
//	trespass  reach another network's pod through the id the host's network
//	          namespace holds for it (see trespass; the target on stdin)
//
// Installed as /opt/network/gc it runs the attack with no arguments and
// prints the report the same way. Run as `hostile hostile-main` (the image's
// main executable), it races the exec agent's start (raceAgent), runs the
// contain and wall attacks (the netns dir named by KURMA_HOSTILE_NETNS_DIR),
// writes the reports as JSON to
// /var/lib/cni/hostile-main.json (the network's state dir, which the test
// reads on the host) and runs until SIGTERM.
//
// It must be static (CGO_ENABLED=0): it runs inside the plugin image.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// The main goroutine stays on the main thread (peekCall enters a pod on
// it, which /proc/<pid>/ns/net shows).
func init() { runtime.LockOSThread() }

// stageArg marks the re-executed processes of "escape" and of the forged
// agent of "plant" (argv[1]).
const (
	escapeChild      = "hostile-escape-child"
	escapeGrandchild = "hostile-escape-grandchild"
	forgedAgent      = "hostile-forged-agent"
	mainStage        = "hostile-main"
	exitChild        = "hostile-exit"
	sleepStage       = "hostile-sleep"
)

// mainReport is where the main executable leaves its report.
const mainReport = "/var/lib/cni/hostile-main.json"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case escapeChild:
			escapeChildMain()
			return
		case escapeGrandchild:
			leaveCgroup()
			time.Sleep(time.Hour)
			return
		case forgedAgent:
			forgedAgentMain()
			return
		case mainStage:
			hostileMain()
			return
		case exitChild:
			return
		case sleepStage:
			sleepMain()
			return
		}
	}
	if filepath.Base(os.Args[0]) == "gc" {
		_ = json.NewEncoder(os.Stdout).Encode(attack(os.Getenv("KURMA_HOSTILE"), "", ""))
		return
	}
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: add <netns path> <pod uuid> [ifname]")
		os.Exit(2)
	}
	_ = json.NewEncoder(os.Stdout).Encode(attack(os.Getenv("KURMA_HOSTILE"), os.Args[1], os.Args[2]))
}

// attack runs the named attack and returns its report.
func attack(name, netns, pod string) map[string]string {
	switch name {
	case "plant":
		return plant(filepath.Dir(netns))
	case "escalate":
		return escalate()
	case "escape":
		escape(pod)
	case "contain":
		return contain()
	case "wall":
		if netns == "" { // gc: no pod, but the image says where the dir is
			return wall(os.Getenv("KURMA_HOSTILE_NETNS_DIR"))
		}
		return wall(filepath.Dir(netns))
	case "bounds":
		return bounds()
	case "memory":
		hog()
	case "trespass":
		return trespass()
	case "peek":
		return peekCall(netns)
	case "sockdestroy":
		return sockDestroy()
	case "reach":
		return reach()
	}
	fmt.Fprintf(os.Stderr, "hostile: unknown attack %q\n", name)
	os.Exit(2)
	return nil
}

// hostileMain is the image's main executable: see the package comment.
func hostileMain() {
	go func() { _, _ = io.Copy(io.Discard, os.Stdin) }()
	if os.Getenv("KURMA_HOSTILE") == "peek" {
		peekMain(os.Getenv("KURMA_HOSTILE_NETNS_DIR"))
		waitForTerm()
		return
	}
	report := raceAgent(2 * time.Second)
	for k, v := range contain() {
		report[k] = v
	}
	netnsDir := os.Getenv("KURMA_HOSTILE_NETNS_DIR")
	for k, v := range wall(netnsDir) {
		report[k] = v
	}
	b, _ := json.Marshal(report)
	if err := os.WriteFile(mainReport+".tmp", b, 0o644); err == nil {
		_ = os.Rename(mainReport+".tmp", mainReport)
	}
	waitForTerm()
}

func waitForTerm() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
}

// leaveCgroup tries every route out of the process's call cgroup; the
// test checks from the host that the process is still in it.
func leaveCgroup() {
	tmp, err := os.MkdirTemp("", "cg")
	if err == nil && syscall.Mount("none", tmp, "cgroup2", 0, "") == nil {
		_ = os.WriteFile(filepath.Join(tmp, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	attackAgent()
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
		syscall.ESRCH: "ESRCH", syscall.EBUSY: "EBUSY", syscall.ENXIO: "ENXIO", syscall.ENOTDIR: "ENOTDIR",
		syscall.EOPNOTSUPP: "EOPNOTSUPP", syscall.EAGAIN: "EAGAIN", syscall.EISDIR: "EISDIR", syscall.ENOTTY: "ENOTTY",
		syscall.ENOKEY: "ENOKEY", syscall.ENOMEM: "ENOMEM", syscall.ENOSPC: "ENOSPC",
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
	leaveCgroup()
	time.Sleep(time.Hour)
}

// escapeChildMain leaves the session, starts the grandchild with no open
// fd at all, and exits.
func escapeChildMain() {
	if _, err := syscall.Setsid(); err != nil {
		os.Exit(1)
	}
	leaveCgroup()
	self, _ := os.Executable()
	_, err := os.StartProcess(self, []string{self, escapeGrandchild, os.Args[2]}, &os.ProcAttr{})
	if err != nil {
		os.Exit(1)
	}
}
