// Command kurma-agent is kurma's exec agent. kurmad starts it as the
// init of every plugin container (from a read-only bind mount):
//
//	kurma-agent serve [-cni-wrapper VERSION] [-allow-syscalls NAMES] [-own-caps CAPS] [-main-drop-caps CAPS] [-call-memory BYTES] [-call-pids N] [-cgroup v2|freezer] [-guard-sys PATHS] [-main-dir DIR -- PROGRAM ARGS...]
//
// `serve` runs every add/del call instead of paying for a libcontainer exec
// per call: kurmad passes it the listening socket as fd 3, on which it
// serves the calls and kurmad's watch (agent's watch.go). Before anything
// else it makes itself unreachable to plugins (agent.Harden) and guards
// the net sysfs mounts at -guard-sys (agent.UeventGuard). Given a PROGRAM,
// it is the container's init and starts the image's main executable as
// its child, in DIR, from a thread on which it first installed the
// container's seccomp filter (without the agent's clone3 notification)
// and dropped -main-drop-caps (agent.Server.StartMainConfined), with the agent's
// stdin (the config) as its stdin and pipes of the agent's as its stdout
// and stderr, whose lines it relays to kurmad's watch; the main's PID,
// whether the agent was ready while it ran and its end go there too, and
// are kept for the next kurmad while none watches: the container outlives
// kurmad. The agent's own stdout and stderr are kurmad's for the messages
// of a start that fails before it serves. It forwards SIGTERM and the
// other termination signals it gets to the main. It opens the container's
// cgroup (of the given kind, else of the kind it finds: v2 with
// cgroup.kill, else the v1 freezer) itself, under which it makes one
// cgroup per call, then installs the filter and serves. -allow-syscalls is
// the network's allow_syscalls, comma-separated; -own-caps the capabilities
// kurmad gave the agent for itself, which it keeps from the calls and the
// main (agent.Harden); -main-drop-caps those the calls hold and the main
// must not (networkpod's callOnlyCapabilities). -cni-wrapper says the image's /opt/network/<verb>
// are kurma's cni-wrapper of that protocol version; when the agent knows
// that version it runs the wrapper's code in-process (package cniwrap)
// rather than starting it per call.
//
// The agent must be built with CGO_ENABLED=0
// (as the Makefile and every test do): it runs in images without a libc.
// See pkg/networkpod/agent.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// listenFd is the socket kurmad passes to `serve`.
const listenFd = 3

// stderrGrace bounds how long the main's end waits, once reaped, for the
// rest of its stderr (what it left running may hold the pipe open), so
// that its last words come before its end.
const stderrGrace = 500 * time.Millisecond

const usage = `usage: kurma-agent serve [-cni-wrapper VERSION] [-allow-syscalls NAMES] [-own-caps CAPS] [-main-drop-caps CAPS] [-call-memory BYTES] [-call-pids N] [-cgroup v2|freezer] [-guard-sys PATHS] [-main-dir DIR -- PROGRAM [ARGS...]]`

// init wires the main goroutine to the process's main thread for good, so
// that no other goroutine ever runs there. The agent starts each call's
// processes on threads that enter the call's view (another mount
// namespace) and end there, and opens its cgroups on one that enters a
// private one; a thread whose goroutine ends locked is ended, but the main
// thread cannot be: Go parks it where it is instead. Had one of those
// goroutines run on the main thread, /proc/<agent>/ns/mnt (the main
// thread's) would name that namespace ever after, and a kurmad that adopts
// the container, which finds the container's mounts there, would make
// every call's view from an old call's.
func init() {
	// Nothing reads the agent's heap profile: sampling it was 2% of an
	// agent's CPU at a container's start.
	runtime.MemProfileRate = 0
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) < 2 {
		die(2, usage)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	default:
		die(2, usage)
	}
}

func serve(args []string) {
	fs := flag.NewFlagSet("kurma-agent serve", flag.ContinueOnError)
	wrapper := fs.String("cni-wrapper", "", "protocol version of the image's cni-wrapper at /opt/network (empty: none)")
	kind := fs.String("cgroup", "", "kind of the calls' cgroups: v2 or freezer (empty: v2 where it has cgroup.kill, else freezer)")
	allow := fs.String("allow-syscalls", "", "denied system calls the network consents to, comma-separated")
	own := fs.String("own-caps", "", "capabilities the agent holds for itself, kept from the calls, comma-separated")
	mainDrop := fs.String("main-drop-caps", "", "capabilities the calls hold and the main does not, comma-separated")
	guardSys := fs.String("guard-sys", "", "sysfs mounts whose uevent files no process of the container may open, comma-separated")
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
	unix.CloseOnExec(listenFd)
	// kurmad may go (and come back) while the agent runs: a write to its
	// end of the agent's stdout or stderr then fails rather than ends the
	// agent.
	signal.Ignore(syscall.SIGPIPE)
	hub := agent.NewHub()
	// The main's start drops -main-drop-caps from its bounding set, which
	// takes CAP_SETPCAP: the agent keeps that one in its children's sets
	// until the main started, whose start drops it too.
	ownCaps, keepSetpcap := splitList(*own), false
	if *mainDrop != "" && len(mainArgv) > 0 && slices.Contains(ownCaps, "CAP_SETPCAP") {
		ownCaps, keepSetpcap = slices.DeleteFunc(ownCaps, func(c string) bool { return c == "CAP_SETPCAP" }), true
	}
	if err := agent.Harden(ownCaps); err != nil {
		die(1, err.Error())
	}
	s := &agent.Server{Env: os.Environ(), CNIWrapper: *wrapper, Log: hub.Logf, Hub: hub}
	if paths := splitList(*guardSys); len(paths) > 0 {
		// Before the main: no process of the container ever opens a
		// uevent file. fanotify_init is one of the calls the filter
		// denies, installed later.
		guard, err := agent.NewUeventGuard(hub.Logf)
		if err == nil {
			err = guard.Mark("/", paths)
		}
		if err != nil {
			die(1, "uevent guard: "+err.Error())
		}
	}
	var main *agent.MainProcess
	var stderrDone chan struct{}
	if len(mainArgv) > 0 {
		// Before the agent's own filter and cgroups: the main gets
		// neither, only the container's capabilities (Harden) and its
		// own filter (startMain).
		drop := ""
		if keepSetpcap {
			drop = *mainDrop + ",CAP_SETPCAP"
		}
		main, stderrDone = startMain(s, hub, mainArgv, *mainDir, *allow, drop)
	}
	if keepSetpcap {
		if err := agent.Harden([]string{"CAP_SETPCAP"}); err != nil {
			die(1, err.Error())
		}
	}
	groups, unsupported, err := agent.OpenCallGroups(*kind, limits)
	if err != nil {
		die(1, err.Error())
	}
	if len(unsupported) > 0 {
		hub.Logf("no per-call %s limit on this host (no cgroup v1 hierarchy of it): the container's bounds its calls together", strings.Join(unsupported, " or "))
	}
	// Only the agent's clone3 (into a call's cgroup, v2) needs kurmad's
	// answer; the freezer kind forks with clone.
	listener, err := agent.InstallFilter(agent.FilterOptions{Allow: splitList(*allow), NotifyClone3: groups.Kind() == agent.CgroupV2})
	if err != nil {
		die(1, err.Error())
	}
	// Kept, not handed over once: each kurmad that watches gets it.
	hub.SetListener(listener)
	s.Cgroups = groups
	if main != nil {
		// When kurmad first connects, before the reaper starts: the
		// reaper alone tells the main's end, so a main that ended before
		// then is never told ready (MainProcess.Ended).
		s.BeforeReap = func() {
			if !main.Ended() {
				hub.SetReady()
			}
		}
		go func() {
			ws := main.Wait()
			select {
			case <-stderrDone:
			case <-time.After(stderrGrace):
			}
			hub.Exit(ws)
		}()
	}
	err = s.Serve(listenFd)
	die(1, err.Error())
}

// startMain starts the main confined (its filter, its capabilities), with the
// agent's stdin as its stdin and pipes of the agent's as its stdout and
// stderr, relayed to the hub; it forwards termination signals to it. The
// returned channel is closed once the main's stderr reached its end. When
// the main cannot be started the hub tells why and the agent serves on:
// kurmad fails the container.
func startMain(s *agent.Server, hub *agent.Hub, argv []string, dir, allow, drop string) (*agent.MainProcess, chan struct{}) {
	stderrDone := make(chan struct{})
	stdin, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, listenFd+1)
	if err != nil {
		die(1, fmt.Sprintf("keep the config for the main: %v", err))
	}
	var outR, errR, outW, errW *os.File
	if outR, outW, err = os.Pipe(); err == nil {
		errR, errW, err = os.Pipe()
	}
	if err != nil {
		die(1, fmt.Sprintf("the main's output: %v", err))
	}
	// The main's capabilities and filter are set on the thread that
	// forks it (StartMainConfined).
	confine := func() error {
		if drop != "" {
			if err := agent.DropThreadCaps(splitList(drop)); err != nil {
				return err
			}
		}
		_, err := agent.InstallFilter(agent.FilterOptions{Allow: splitList(allow), ThisThread: true})
		return err
	}
	path, err := mainPath(argv[0], dir)
	// Caught from before the main exists, so that a stop sent meanwhile
	// is handed on rather than lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	var m *agent.MainProcess
	if err == nil {
		m, err = s.StartMainConfined(path, argv, os.Environ(), dir, []uintptr{uintptr(stdin), outW.Fd(), errW.Fd()}, confine)
	}
	unix.Close(stdin)
	outW.Close()
	errW.Close()
	// The config is the main's: the agent reads nothing there.
	if null, nerr := unix.Open("/dev/null", unix.O_RDONLY, 0); nerr == nil {
		_ = unix.Dup2(null, 0)
		unix.Close(null)
	}
	go hub.Relay(agent.StreamStdout, outR, make(chan struct{}))
	go hub.Relay(agent.StreamStderr, errR, stderrDone)
	if err != nil {
		hub.Fail(fmt.Sprintf("start main %s in %s: %s", argv[0], dir, strings.ReplaceAll(err.Error(), "\n", " ")))
		return nil, stderrDone
	}
	hub.SetMain(m.Pid)
	go func() {
		for sig := range sigs {
			m.Signal(sig.(syscall.Signal))
		}
	}()
	return m, stderrDone
}

// mainPath is where the main's argv[0] is: a name found in $PATH, as
// exec's LookPath has it, or a path, relative to the main's dir.
func mainPath(name, dir string) (string, error) {
	if !strings.Contains(name, "/") {
		return exec.LookPath(name)
	}
	if !filepath.IsAbs(name) {
		name = filepath.Join(dir, name)
	}
	return name, nil
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
