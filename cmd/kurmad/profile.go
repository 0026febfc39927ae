package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	runtimepprof "runtime/pprof"
	"syscall"
)

// Profiling hooks for `make bench` and for finding where kurmad's time goes.
// Both are off unless their environment variable is set:
//
//	KURMAD_CPUPROFILE=/path/cpu.pprof   CPU profile from start until SIGTERM/SIGINT
//	KURMAD_PPROF_SOCKET=/path/pprof.sock net/http/pprof served on a unix socket
//	                                     (goroutine counts, heap, on-demand CPU profiles)
//
// The socket is root-only (0600) like the API socket; it is never a TCP port.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		return // libcontainer's container init: never profile the plugin side
	}
	if path := os.Getenv("KURMAD_CPUPROFILE"); path != "" {
		startCPUProfile(path)
	}
	if sock := os.Getenv("KURMAD_PPROF_SOCKET"); sock != "" {
		servePprof(sock)
	}
}

func startCPUProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kurmad: KURMAD_CPUPROFILE: %v\n", err)
		return
	}
	if err := runtimepprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "kurmad: KURMAD_CPUPROFILE: %v\n", err)
		f.Close()
		return
	}
	// main's own signal context also gets the signal and starts the
	// shutdown; stopping here writes the profile while that runs (stopping
	// the plugin containers takes far longer than flushing a profile).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		runtimepprof.StopCPUProfile()
		f.Close()
	}()
}

func servePprof(sock string) {
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kurmad: KURMAD_PPROF_SOCKET: %v\n", err)
		return
	}
	_ = os.Chmod(sock, 0o600)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() { _ = http.Serve(ln, mux) }()
}
