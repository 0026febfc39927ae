// Command kurmactl is the command-line client of kurmad's API: it creates,
// lists, inspects and removes pods, lists networks and manages images.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// version is the client version, set at build time with
// -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
