// Command cni-wrapper is the program inside kurma's plugin images. One static
// binary is installed as /opt/network/add, del, check, gc, status and the
// image's main executable /opt/network/setup; it picks its verb from the name
// it was started as (argv[0]).
//
//	add|del|check <netns path> <pod uuid> [ifname]   (plugin config on stdin)
//	gc|status                                        (plugin config on stdin)
//	setup                                            (plugin config on stdin; runs until SIGTERM)
//
// The verbs run the CNI plugin(s) named by the config from $CNI_PATH
// (default /opt/cni/bin) through libcni, with the libcni cache under
// $KURMA_CNI_CACHE_DIR (default /var/lib/cni) so DEL and CHECK get the ADD
// result as prevResult and GC finds the attachments to delete. add prints the plugin's result on stdout in the
// version the plugin produced. Any failure prints a CNI error object on stdout
// and one readable line on stderr and exits 1. Plugin stderr is forwarded to
// stderr; nothing but the result or the error object is written to stdout.
//
// For tests the verb may also be given as the first argument:
// `cni-wrapper add <netns> <uuid> [ifname]`.
//
// The logic lives in package cniwrap, which kurma-agent also runs
// in-process for images that declare this wrapper (netplugin.WrapperVersion).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kurma-project/kurma/pkg/cniwrap"
)

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches on argv[0] (or argv[1] when started under its own name) and
// returns the process exit code.
func run(argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	verb := ""
	if len(argv) > 0 {
		verb = filepath.Base(argv[0])
	}
	if !cniwrap.IsVerb(verb) && len(argv) > 1 && cniwrap.IsVerb(argv[1]) {
		argv = argv[1:]
		verb = argv[0]
	}
	if !cniwrap.IsVerb(verb) {
		fmt.Fprintf(stderr, "cni-wrapper: started as %q; install it as %s, or run `cni-wrapper %s ...`\n",
			verb, strings.Join(cniwrap.Verbs(), ", "), strings.Join(cniwrap.Verbs(), "|"))
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return cniwrap.Run(ctx, verb, argv[1:], stdin, stdout, stderr, cniwrap.EnvFrom(os.Environ()), nil)
}
