// Command kurma-agent is kurma's exec agent. kurmad starts it once inside
// every network container (from a read-only bind mount) as
//
//	kurma-agent <socket path>
//
// and then runs every add/del call through it instead of paying for a
// libcontainer exec per call. It is built static (CGO_ENABLED=0): plugin
// images need not contain a libc. See pkg/networkpod/agent.
package main

import (
	"fmt"
	"net"
	"os"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kurma-agent <socket path>")
		os.Exit(2)
	}
	sock := os.Args[1]
	_ = os.Remove(sock) // left by an agent that died
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kurma-agent: %v\n", err)
		os.Exit(1)
	}
	s := &agent.Server{
		Env: os.Environ(),
		Log: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "kurma-agent: "+format+"\n", args...)
		},
	}
	err = s.Serve(l)
	fmt.Fprintf(os.Stderr, "kurma-agent: %v\n", err)
	os.Exit(1)
}
