// Command kurma-agent is kurma's exec agent. kurmad starts it in every
// network container (from a read-only bind mount) twice over:
//
//	kurma-agent exec -- PROGRAM ARGS...
//	kurma-agent serve [-cni-wrapper VERSION] -cgroup v2|freezer
//
// `exec` is the container's first process: it installs the plugin
// container's seccomp filter and executes the image's main executable in its
// place (PID 1 stays the main executable). `serve` runs every add/del call
// instead of paying for a libcontainer exec per call: kurmad passes it the
// listening socket as fd 3 and the container's cgroup directory (of the
// given kind) as fd 4, under which it makes one cgroup per call.
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
	"syscall"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// Descriptors kurmad passes to `serve`.
const (
	listenFd = 3
	cgroupFd = 4
)

const usage = `usage: kurma-agent exec -- PROGRAM [ARGS...]
       kurma-agent serve [-cni-wrapper VERSION] -cgroup v2|freezer`

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
	if len(args) < 2 || args[0] != "--" {
		die(2, usage)
	}
	argv := args[1:]
	path, err := exec.LookPath(argv[0])
	if err != nil {
		die(127, err.Error())
	}
	if err := agent.InstallSeccomp(); err != nil {
		die(1, err.Error())
	}
	err = syscall.Exec(path, argv, os.Environ())
	die(126, fmt.Sprintf("exec %s: %v", path, err))
}

func serve(args []string) {
	fs := flag.NewFlagSet("kurma-agent serve", flag.ContinueOnError)
	wrapper := fs.String("cni-wrapper", "", "protocol version of the image's cni-wrapper at /opt/network (empty: none)")
	kind := fs.String("cgroup", "", "kind of the cgroup directory at fd 4: v2 or freezer")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		die(2, usage)
	}
	groups, err := agent.NewCallGroups(*kind, cgroupFd)
	if err != nil {
		die(2, err.Error())
	}
	if err := agent.InstallSeccomp(); err != nil {
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

func die(code int, msg string) {
	fmt.Fprintln(os.Stderr, "kurma-agent:", msg)
	os.Exit(code)
}
