// Command cni-wrapper is the program inside kurma's plugin images. One static
// binary is installed as /opt/network/add, /opt/network/del,
// /opt/network/check and the image's main executable /opt/network/setup; it
// picks its verb from the name it was started as (argv[0]).
//
//	add|del|check <netns path> <pod uuid> [ifname]   (plugin config on stdin)
//	setup                                            (plugin config on stdin; runs until SIGTERM)
//
// add/del/check run the CNI plugin(s) named by the config from $CNI_PATH
// (default /opt/cni/bin) through libcni, with the libcni cache under
// $KURMA_CNI_CACHE_DIR (default /var/lib/cni) so DEL and CHECK get the ADD
// result as prevResult. add prints the plugin's result on stdout in the
// version the plugin produced. Any failure prints a CNI error object on stdout
// and one readable line on stderr and exits 1. Plugin stderr is forwarded to
// stderr; nothing but the result or the error object is written to stdout.
//
// For tests the verb may also be given as the first argument:
// `cni-wrapper add <netns> <uuid> [ifname]`.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// Environment variables the wrapper reads.
const (
	envCNIPath  = "CNI_PATH"            // plugin search path, ':'-separated
	envCacheDir = "KURMA_CNI_CACHE_DIR" // libcni cache (results for DEL/CHECK)

	defaultCNIPath  = "/opt/cni/bin"
	defaultCacheDir = "/var/lib/cni"
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
	if !isVerb(verb) && len(argv) > 1 && isVerb(argv[1]) {
		argv = argv[1:]
		verb = argv[0]
	}
	if !isVerb(verb) {
		fmt.Fprintf(stderr, "cni-wrapper: started as %q; install it as add, del, check or setup, or run `cni-wrapper add|del|check|setup ...`\n", verb)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	env := loadEnv()
	if verb == "setup" {
		return runSetup(ctx, env, stdin, stderr)
	}
	return runCommand(ctx, env, verb, argv[1:], stdin, stdout, stderr)
}

func isVerb(s string) bool {
	switch s {
	case "add", "del", "check", "setup":
		return true
	}
	return false
}

// environment is what the wrapper takes from its process environment.
type environment struct {
	cniPath  []string
	cacheDir string
}

func loadEnv() environment {
	e := environment{cniPath: filepath.SplitList(os.Getenv(envCNIPath)), cacheDir: os.Getenv(envCacheDir)}
	if len(e.cniPath) == 0 {
		e.cniPath = []string{defaultCNIPath}
	}
	if e.cacheDir == "" {
		e.cacheDir = defaultCacheDir
	}
	return e
}
