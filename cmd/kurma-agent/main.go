// Command kurma-agent is kurma's exec agent. kurmad starts it in every
// plugin container (from a read-only bind mount) twice over:
//
//	kurma-agent exec [-allow-syscalls NAMES] -- PROGRAM ARGS...
//	kurma-agent serve [-cni-wrapper VERSION] [-allow-syscalls NAMES] [-own-caps CAPS] [-call-memory BYTES] [-call-pids N] -cgroup v2|freezer
//
// `exec` is the container's first process: it installs the plugin
// container's seccomp filter and executes the image's main executable in its
// place (PID 1 stays the main executable). `serve` runs every add/del call
// instead of paying for a libcontainer exec per call: kurmad passes it the
// listening socket as fd 3 and a unix socket as fd 4, over which it hands
// kurmad its seccomp listener. Before anything else it makes itself
// unreachable to plugins (agent.Harden); it opens the container's cgroup
// (of the given kind) itself, under which it makes one cgroup per call,
// then installs the filter and serves. -allow-syscalls is the network's
// allow_syscalls, comma-separated; -own-caps the capabilities kurmad gave
// the agent for itself, which it keeps from the calls (agent.Harden).
// -cni-wrapper says the image's /opt/network/<verb> are kurma's
// cni-wrapper of that protocol version; when the agent knows that version
// it runs the wrapper's code in-process (package cniwrap) rather than
// starting it per call. The agent must be built with CGO_ENABLED=0 (as the
// Makefile and every test do): it runs in images without a libc. See
// pkg/networkpod/agent.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// Descriptors kurmad passes to `serve`.
const (
	listenFd = 3
	notifyFd = 4
)

const usage = `usage: kurma-agent exec [-allow-syscalls NAMES] -- PROGRAM [ARGS...]
       kurma-agent serve [-cni-wrapper VERSION] [-allow-syscalls NAMES] [-own-caps CAPS] [-call-memory BYTES] [-call-pids N] -cgroup v2|freezer`

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
	allow := fs.String("allow-syscalls", "", "denied system calls the network consents to, comma-separated")
	own := fs.String("own-caps", "", "capabilities the agent holds for itself, kept from the calls, comma-separated")
	var limits agent.CallLimits
	fs.Int64Var(&limits.Memory, "call-memory", 0, "each call's memory limit in bytes (0: the container's)")
	fs.Int64Var(&limits.Pids, "call-pids", 0, "each call's task limit (0: the container's)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		die(2, usage)
	}
	unix.CloseOnExec(notifyFd)
	if err := agent.Harden(splitList(*own)); err != nil {
		die(1, err.Error())
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
	s := &agent.Server{
		Env:        os.Environ(),
		CNIWrapper: *wrapper,
		Cgroups:    groups,
		Log: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "kurma-agent: "+format+"\n", args...)
		},
	}
	err = s.Serve(listenFd)
	die(1, err.Error())
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
