// Command kurma-agent is kurma's exec agent. kurmad starts it as the
// init of every plugin container (from a read-only bind mount):
//
//	kurma-agent serve [-cni-wrapper VERSION] [-allow-syscalls NAMES] [-own-caps CAPS] [-main-drop-caps CAPS] [-call-memory BYTES] [-call-pids N] -cgroup v2|freezer|-cgroup-from-fd [-main-dir DIR -- PROGRAM ARGS...]
//	kurma-agent exec [-allow-syscalls NAMES] [-drop-caps CAPS] -- PROGRAM ARGS...
//
// `serve` runs every add/del call instead of paying for a libcontainer exec
// per call: kurmad passes it the listening socket as fd 3 and a unix socket
// as fd 4, over which it hands kurmad its seccomp listener. Before anything
// else it makes itself unreachable to plugins (agent.Harden). Given a
// PROGRAM, it is the container's init and starts the image's main
// executable as its child through `exec` (its stdin, stdout and stderr are
// the agent's: the config, the main's two log streams), in DIR; its own
// messages then go to fd 5, and fd 6 tells kurmad the main's PID ("main
// PID"), that the agent is about to serve while the main runs ("ready"),
// the main's end ("exit WAITSTATUS") or why it could not start ("fail
// MESSAGE"), one line each, in the order they happened (see startMain and
// agent.MainProcess). It forwards SIGTERM and
// the other termination signals it gets to the main. It opens the
// container's cgroup (of the given kind, or of the kind kurmad writes on
// fd 4, a line, once the container's cgroups exist, after a line
// "guarded" that lets the main start) itself, under which it
// makes one cgroup per call, then installs the filter and serves. -allow-syscalls is
// the network's allow_syscalls, comma-separated; -own-caps the capabilities
// kurmad gave the agent for itself, which it keeps from the calls and the
// main (agent.Harden); -main-drop-caps those the calls hold and the main
// must not (networkpod's callOnlyCapabilities), which `exec` drops. -cni-wrapper says the image's /opt/network/<verb>
// are kurma's cni-wrapper of that protocol version; when the agent knows
// that version it runs the wrapper's code in-process (package cniwrap)
// rather than starting it per call.
//
// `exec` installs the plugin container's seccomp filter and executes
// PROGRAM in its place: the main executable's own filter, without the
// agent's clone3 notification; -drop-caps are dropped from every set first.
// The agent must be built with CGO_ENABLED=0
// (as the Makefile and every test do): it runs in images without a libc.
// See pkg/networkpod/agent.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// Descriptors kurmad passes to `serve`; the last two only with a main.
const (
	listenFd = 3
	notifyFd = 4
	logFd    = 5
	statusFd = 6
)

const usage = `usage: kurma-agent exec [-allow-syscalls NAMES] [-drop-caps CAPS] -- PROGRAM [ARGS...]
       kurma-agent serve [-cni-wrapper VERSION] [-allow-syscalls NAMES] [-own-caps CAPS] [-main-drop-caps CAPS] [-call-memory BYTES] [-call-pids N] -cgroup v2|freezer|-cgroup-from-fd [-main-dir DIR -- PROGRAM [ARGS...]]`

func main() {
	if len(os.Args) < 2 {
		die(2, usage)
	}
	switch os.Args[1] {
	case "exec":
		execMain(os.Args[2:])
	case "serve":
		serve(os.Args[2:])
	default:
		die(2, usage)
	}
}

// execMain installs the seccomp filter and executes argv (after "--") with
// the process's environment, looked up in its PATH.
func execMain(args []string) {
	fs := flag.NewFlagSet("kurma-agent exec", flag.ContinueOnError)
	allow := fs.String("allow-syscalls", "", "denied system calls the network consents to, comma-separated")
	drop := fs.String("drop-caps", "", "capabilities to drop from every set before the program runs, comma-separated (CAP_SETPCAP, if named, last)")
	if err := fs.Parse(args); err != nil {
		die(2, usage)
	}
	// flag stops at "--" and drops it: the program follows.
	if dash := len(args) - fs.NArg() - 1; fs.NArg() == 0 || dash < 0 || args[dash] != "--" {
		die(2, usage)
	}
	argv := fs.Args()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		die(127, err.Error())
	}
	if *drop != "" {
		if err := agent.Harden(splitList(*drop)); err != nil {
			die(1, err.Error())
		}
	}
	if _, err := agent.InstallFilter(agent.FilterOptions{Allow: splitList(*allow)}); err != nil {
		die(1, err.Error())
	}
	err = syscall.Exec(path, argv, os.Environ())
	die(126, fmt.Sprintf("exec %s: %v", path, err))
}

func serve(args []string) {
	fs := flag.NewFlagSet("kurma-agent serve", flag.ContinueOnError)
	wrapper := fs.String("cni-wrapper", "", "protocol version of the image's cni-wrapper at /opt/network (empty: none)")
	kind := fs.String("cgroup", "", "kind of the calls' cgroups: v2 or freezer")
	kindFromFd := fs.Bool("cgroup-from-fd", false, "read from fd 4 a line \"guarded\" before starting the main, then the kind of the calls' cgroups, before sending the listener there")
	allow := fs.String("allow-syscalls", "", "denied system calls the network consents to, comma-separated")
	own := fs.String("own-caps", "", "capabilities the agent holds for itself, kept from the calls, comma-separated")
	mainDrop := fs.String("main-drop-caps", "", "capabilities the calls hold and the main does not, comma-separated")
	var limits agent.CallLimits
	fs.Int64Var(&limits.Memory, "call-memory", 0, "each call's memory limit in bytes (0: the container's)")
	fs.Int64Var(&limits.Pids, "call-pids", 0, "each call's task limit (0: the container's)")
	mainDir := fs.String("main-dir", "/", "the main executable's working directory")
	if err := fs.Parse(args); err != nil {
		die(2, usage)
	}
	mainArgv := fs.Args()
	if len(mainArgv) > 0 {
		// flag stops at "--" and drops it: the main follows.
		if dash := len(args) - fs.NArg() - 1; dash < 0 || args[dash] != "--" {
			die(2, usage)
		}
	}
	// Nothing kurmad passed may reach the main or a plugin.
	for _, fd := range []int{listenFd, notifyFd, logFd, statusFd} {
		unix.CloseOnExec(fd)
	}
	var mainStdio []uintptr
	if len(mainArgv) > 0 {
		mainStdio = takeStdio()
	}
	// The main's start (`exec`) drops -main-drop-caps from its bounding
	// set, which takes CAP_SETPCAP: the agent keeps that one in its
	// children's sets until the main started, and `exec` drops it too.
	ownCaps, keepSetpcap := splitList(*own), false
	if *mainDrop != "" && len(mainArgv) > 0 && slices.Contains(ownCaps, "CAP_SETPCAP") {
		ownCaps, keepSetpcap = slices.DeleteFunc(ownCaps, func(c string) bool { return c == "CAP_SETPCAP" }), true
	}
	if err := agent.Harden(ownCaps); err != nil {
		die(1, err.Error())
	}
	s := &agent.Server{
		Env:        os.Environ(),
		CNIWrapper: *wrapper,
		Log: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "kurma-agent: "+format+"\n", args...)
		},
	}
	if *kindFromFd {
		// kurmad says so once the container is guarded, before the main
		// may start (see readLine).
		if line := readLine(); line != "guarded" {
			die(1, fmt.Sprintf("kurmad said %q, not that the container is guarded", line))
		}
	}
	ready := func() {}
	if len(mainArgv) > 0 {
		// Before the agent's own filter and cgroups: the main gets
		// neither, only the container's capabilities (Harden) and its
		// own filter (`exec`).
		drop := ""
		if keepSetpcap {
			drop = *mainDrop + ",CAP_SETPCAP"
		}
		ready = startMain(s, mainArgv, *mainDir, *allow, drop, mainStdio)
	}
	if keepSetpcap {
		if err := agent.Harden([]string{"CAP_SETPCAP"}); err != nil {
			die(1, err.Error())
		}
	}
	if *kindFromFd {
		*kind = readLine()
	}
	groups, err := agent.OpenCallGroups(*kind)
	if err != nil {
		die(1, err.Error())
	}
	unsupported, err := groups.SetCallLimits(limits)
	if err != nil {
		die(1, err.Error())
	}
	if len(unsupported) > 0 {
		fmt.Fprintf(os.Stderr, "kurma-agent: no per-call %s limit on this host (no cgroup v1 hierarchy of it): the container's bounds its calls together\n", strings.Join(unsupported, " or "))
	}
	// Only the agent's clone3 (into a call's cgroup, v2) needs kurmad's
	// answer; the freezer kind forks with clone.
	listener, err := agent.InstallFilter(agent.FilterOptions{Allow: splitList(*allow), NotifyClone3: *kind == agent.CgroupV2})
	if err != nil {
		die(1, err.Error())
	}
	if err := agent.SendListener(notifyFd, listener); err != nil {
		die(1, err.Error())
	}
	s.Cgroups = groups
	ready() // before Serve: its reaper alone tells the main's end
	err = s.Serve(listenFd)
	die(1, err.Error())
}

// readLine reads a line kurmad writes on fd 4: "guarded" once the
// container's mounts are watched (the main may start), then the kind of
// the calls' cgroups.
func readLine() string {
	var line []byte
	b := make([]byte, 1)
	for len(line) < 32 {
		n, err := unix.Read(notifyFd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			die(1, fmt.Sprintf("read a line from kurmad: %v", err))
		}
		if b[0] == '\n' {
			return string(line)
		}
		line = append(line, b[0])
	}
	die(1, "read a line from kurmad: too long")
	return ""
}

// takeStdio moves the agent's stdin, stdout and stderr (the config and the
// main's log streams) aside for the main, and makes fd 5 the agent's own
// stdout and stderr and /dev/null its stdin; it returns the moved fds
// (close-on-exec: passed to the main only).
func takeStdio() []uintptr {
	var out []uintptr
	for fd := range 3 {
		moved, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, statusFd+1)
		if err != nil {
			die(1, fmt.Sprintf("keep fd %d for the main: %v", fd, err))
		}
		out = append(out, uintptr(moved))
	}
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		die(1, err.Error())
	}
	for _, d := range [][2]int{{null, 0}, {logFd, 1}, {logFd, 2}} {
		if err := unix.Dup2(d[0], d[1]); err != nil {
			die(1, fmt.Sprintf("fd %d: %v", d[1], err))
		}
	}
	unix.Close(null)
	unix.Close(logFd)
	return out
}

// startMain starts the main through `exec` (its seccomp filter), tells
// kurmad its PID on fd 6, then, in the background, forwards termination
// signals to it and tells kurmad its end. When the main cannot be started
// the agent says why on fd 6 and serves on: kurmad fails the container.
//
// It returns ready, which the agent calls once it is about to serve and
// before its reaper runs: it tells kurmad "ready" on fd 6 unless the main
// has ended by then (MainProcess.Ended), when it tells nothing and the
// reaper then tells the main's end. kurmad reports the container running
// only after "ready": the main's end and the agent's readiness come in the
// order they happened, on the one pipe, so a main that ended before the
// agent could serve never shows as running.
func startMain(s *agent.Server, argv []string, dir, allow, drop string, stdio []uintptr) (ready func()) {
	status := os.NewFile(statusFd, "status")
	tell := func(format string, args ...any) {
		if _, err := fmt.Fprintf(status, format+"\n", args...); err != nil {
			// kurmad is gone: end the container, as the main's end
			// did when it was the init.
			die(1, "tell kurmad about the main: "+err.Error())
		}
	}
	self, args := os.Args[0], []string{os.Args[0], "exec"}
	if allow != "" {
		args = append(args, "-allow-syscalls="+allow)
	}
	if drop != "" {
		args = append(args, "-drop-caps="+drop)
	}
	args = append(append(args, "--"), argv...)
	// Caught from before the main exists, so that a stop sent meanwhile
	// is handed on rather than lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	m, err := s.StartMain(self, args, os.Environ(), dir, stdio)
	for _, fd := range stdio {
		unix.Close(int(fd))
	}
	if err != nil {
		tell("fail start main %s in %s: %s", argv[0], dir, strings.ReplaceAll(err.Error(), "\n", " "))
		return func() {}
	}
	tell("main %d", m.Pid)
	go func() {
		for sig := range sigs {
			m.Signal(sig.(syscall.Signal))
		}
	}()
	go func() {
		ws := m.Wait()
		tell("exit %d", uint32(ws))
	}()
	return func() {
		if !m.Ended() {
			tell("ready")
		}
	}
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func die(code int, msg string) {
	fmt.Fprintln(os.Stderr, "kurma-agent:", msg)
	os.Exit(code)
}
