// Command kurma-init starts kurma's plugin containers, for kurmad:
//
//	kurma-init serve    (fd 3: kurmad's SOCK_SEQPACKET socket; see package initd)
//	kurma-init init     (libcontainer's re-execution: becomes a container's init)
//
// libcontainer starts every container process by re-executing the binary
// that asked for it; kurma-init is that binary, so a container start pays
// for the start of a small program (libcontainer and what it needs), not
// for kurmad's. kurmad runs one kurma-init, beside itself (as kurma-agent),
// for as long as it runs; the containers outlive both.
package main

import (
	"fmt"
	"os"
	"runtime"

	_ "github.com/opencontainers/cgroups/devices" // device rules for the containers' cgroups
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // cgo: joins namespaces before Go starts
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/networkpod/initd"
)

// The socket kurmad passes to serve.
const serveFd = 3

func init() {
	// Nothing reads a heap profile of kurma-init or of a container's
	// init: sampling one cost every start.
	runtime.MemProfileRate = 0
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init() // does not return
	}
	// libcontainer's mount-source helper goroutine joins a new container's
	// mount namespace on a locked thread and exits without unlocking, which
	// ends that thread, except the main one: pinning main to it keeps the
	// helper off it.
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) != 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: kurma-init serve (run by kurmad)")
		os.Exit(2)
	}
	// libcontainer forwards each init's log here: one JSON line each, which
	// kurmad reads on this process's stderr.
	logrus.SetOutput(os.Stderr)
	logrus.SetFormatter(&logrus.JSONFormatter{})
	logf := func(format string, args ...any) { logrus.Errorf(format, args...) }
	if err := initd.Serve(serveFd, logf); err != nil {
		logrus.Error(err)
		os.Exit(1)
	}
}
