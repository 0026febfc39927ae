// Command kurma-agent is kurma's exec agent. kurmad starts it once inside
// every network container (from a read-only bind mount) as
//
//	kurma-agent [-cni-wrapper VERSION] <socket path>
//
// and then runs every add/del call through it instead of paying for a
// libcontainer exec per call. -cni-wrapper says the image's
// /opt/network/{add,del,check} are kurma's cni-wrapper of that protocol
// version; when the agent knows that version it runs the wrapper's code
// in-process (package cniwrap) rather than starting it per call. The agent
// must be built with CGO_ENABLED=0 (as the Makefile and every test do): it
// runs in images without a libc. See pkg/networkpod/agent.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

func main() {
	fs := flag.NewFlagSet("kurma-agent", flag.ContinueOnError)
	wrapper := fs.String("cni-wrapper", "", "protocol version of the image's cni-wrapper at /opt/network (empty: none)")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: kurma-agent [-cni-wrapper VERSION] <socket path>")
		os.Exit(2)
	}
	s := &agent.Server{
		Env:        os.Environ(),
		CNIWrapper: *wrapper,
		Log: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "kurma-agent: "+format+"\n", args...)
		},
	}
	err := s.ListenAndServe(fs.Arg(0))
	fmt.Fprintf(os.Stderr, "kurma-agent: %v\n", err)
	os.Exit(1)
}
