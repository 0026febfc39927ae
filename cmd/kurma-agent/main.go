// Command kurma-agent is kurma's exec agent. kurmad starts it once inside
// every network container (from a read-only bind mount) as
//
//	kurma-agent <socket path>
//
// and then runs every add/del call through it instead of paying for a
// libcontainer exec per call. It links no cgo (it does not use package net),
// so it is static however it is built: plugin images need no libc. See
// pkg/networkpod/agent.
package main

import (
	"fmt"
	"os"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kurma-agent <socket path>")
		os.Exit(2)
	}
	s := &agent.Server{
		Env: os.Environ(),
		Log: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "kurma-agent: "+format+"\n", args...)
		},
	}
	err := s.ListenAndServe(os.Args[1])
	fmt.Fprintf(os.Stderr, "kurma-agent: %v\n", err)
	os.Exit(1)
}
