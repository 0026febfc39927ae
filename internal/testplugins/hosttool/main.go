// Command hosttool is a static multi-call test program for the plugin
// host's tests: copied into a test image's rootfs under several names, it
// behaves according to the name it is run as (argv[0]'s base name).
//
//	main      read stdin (the plugin config) and run until SIGTERM
//	recordmain  like main, but first writes its stdin to /var/lib/cni/main-stdin
//	          (the network's state dir: the test reads it on the host)
//	add, del, check, gc  (as /opt/network/<verb>) append the verb to
//	          /var/lib/cni/calls and fail: an image whose verbs must never run
//	stubborn  like main, but ignores SIGTERM
//	failmain  print a message on stderr and exit 3 (FAILMAIN_DELAY delays it)
//	noop      exit 0 at once (benchmarks)
//	echo      copy stdin to stdout, args to stderr, exit 0
//	fail      print a CNI error object on stdout, "boom" on stderr, exit 1
//	failtext  print a plain-text message and then 8 KiB of dots on stdout, nothing on stderr, exit 1
//	hang      start a setsid'd background child that holds stdout, sleep forever
//	flood     write 3 MiB to stdout and to stderr, exit 0
//	floodmain write 5000 lines to stderr and 5000 to stdout at once, then one to either in turn every 100 ms
//	          until SIGTERM (a main executable flooding kurmad's log)
//	status    while /var/lib/cni/not-ready exists, print a CNI error 50
//	          whose message is its first line and exit 1; else exit 0
//	kubeenv   print, as JSON, what it finds of Kubernetes credentials: the
//	          KUBERNETES_* and NODE_NAME variables of its environment and of
//	          the container's main executable (the process named main), the service account token (and
//	          what writing it gives), and the mounts naming the dir in args[1]
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	name := filepath.Base(os.Args[0])
	switch name {
	case "main":
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "hosttool main: up")
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		fmt.Fprintln(os.Stderr, "hosttool main: SIGTERM")
	case "recordmain":
		b, _ := io.ReadAll(os.Stdin)
		if err := os.WriteFile("/var/lib/cni/main-stdin", b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "hosttool recordmain:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "hosttool recordmain: up")
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
	case "add", "del", "check", "gc":
		f, err := os.OpenFile("/var/lib/cni/calls", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err == nil {
			fmt.Fprintln(f, name, strings.Join(os.Args[1:], " "))
			f.Close()
		}
		fmt.Printf(`{"cniVersion":"1.0.0","code":100,"msg":"hosttool: %s must never be called on this image"}`+"\n", name)
		os.Exit(1)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		_, _ = io.Copy(io.Discard, os.Stdin)
		time.Sleep(time.Hour)
	case "failmain":
		if d, err := time.ParseDuration(os.Getenv("FAILMAIN_DELAY")); err == nil {
			time.Sleep(d)
		}
		// FAILMAIN_LINES lines, then a moment later the last in a write of
		// its own: the main ends while its reader may be at the first.
		n, _ := strconv.Atoi(os.Getenv("FAILMAIN_LINES"))
		for i := range n {
			fmt.Fprintf(os.Stderr, "hosttool failmain: line %d\n", i)
		}
		if n > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "hosttool failmain: giving up")
		os.Exit(3)
	case "noop":
	case "echo":
		_, _ = io.Copy(os.Stdout, os.Stdin)
		fmt.Fprintln(os.Stderr, strings.Join(os.Args[1:], " "))
	case "fail":
		fmt.Println(`{"cniVersion":"1.0.0","code":11,"msg":"no more addresses","details":"range 10.0.0.0/30 is full"}`)
		fmt.Fprintln(os.Stderr, "boom")
		os.Exit(1)
	case "failtext":
		fmt.Println("failtext: no free address in 10.0.0.0/30")
		fmt.Println(strings.Repeat(".", 8<<10))
		os.Exit(1)
	case "hang":
		// The child keeps our stdout and stderr, leaves our process group
		// and session, and sleeps: the original Kurma waited on it forever.
		attr := &os.ProcAttr{
			Files: []*os.File{nil, os.Stdout, os.Stderr},
			Sys:   &syscall.SysProcAttr{Setsid: true},
		}
		child := filepath.Join(filepath.Dir(os.Args[0]), "hangchild")
		if _, err := os.StartProcess(child, []string{child}, attr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("started")
		time.Sleep(time.Hour)
	case "hangchild":
		time.Sleep(time.Hour)
	case "flood":
		buf := make([]byte, 3<<20)
		for i := range buf {
			buf[i] = 'x'
		}
		_, _ = os.Stdout.Write(buf)
		_, _ = os.Stderr.Write(buf)
	case "floodmain":
		go func() { _, _ = io.Copy(io.Discard, os.Stdin) }()
		for i := range 5000 {
			fmt.Fprintf(os.Stderr, "flood line %d\n", i)
			fmt.Fprintf(os.Stdout, "flood line %d\n", i)
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		ticks := 0
		for {
			select {
			case <-ch:
				return
			case <-time.After(100 * time.Millisecond):
				// One stream at a time, well under the log rate, so that
				// each stream's next line (and its count of lines left out)
				// gets through.
				ticks++
				fmt.Fprintln([]*os.File{os.Stderr, os.Stdout}[ticks%2], "floodmain: tick")
			}
		}
	case "status":
		b, err := os.ReadFile("/var/lib/cni/not-ready")
		if err != nil {
			return
		}
		msg, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		fmt.Printf(`{"cniVersion":"1.1.0","code":50,"msg":%q}`+"\n", msg)
		os.Exit(1)
	case "kubeenv":
		kubeEnv(os.Args[1:])
	default:
		fmt.Fprintf(os.Stderr, "hosttool: unknown name %q\n", name)
		os.Exit(2)
	}
}

// kubeEnv reports what the process finds of Kubernetes credentials.
func kubeEnv(args []string) {
	report := map[string]string{}
	vars := func(env []string) string {
		var out []string
		for _, kv := range env {
			if strings.HasPrefix(kv, "KUBERNETES_") || strings.HasPrefix(kv, "NODE_NAME=") {
				out = append(out, kv)
			}
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	report["env"] = vars(os.Environ())
	// The main executable is the agent's child, named main (PID 1 is the
	// agent, whose /proc files no plugin may read).
	mainEnv := "/proc/1/environ"
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "main" {
				mainEnv = "/proc/" + e.Name() + "/environ"
				break
			}
		}
	}
	if b, err := os.ReadFile(mainEnv); err == nil {
		report["main env"] = vars(strings.Split(string(b), "\x00"))
	} else {
		report["main env"] = errName(err)
	}
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	if b, err := os.ReadFile(dir + "/token"); err == nil {
		report["token"] = string(b)
	} else {
		report["token"] = errName(err)
	}
	if f, err := os.OpenFile(dir+"/token", os.O_WRONLY|os.O_TRUNC, 0); err == nil {
		f.Close()
		report["write token"] = "ok"
	} else {
		report["write token"] = errName(err)
	}
	if err := os.WriteFile(dir+"/planted", []byte("x"), 0o644); err == nil {
		report["plant in the service account dir"] = "ok"
	} else {
		report["plant in the service account dir"] = errName(err)
	}
	if len(args) > 0 {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, args[0]) || strings.Contains(l, "serviceaccount") {
				n++
			}
		}
		report["mounts of the service account"] = fmt.Sprint(n)
	}
	_ = json.NewEncoder(os.Stdout).Encode(report)
}

// errName is an error's errno name (ENOENT, EROFS, ...), else its text.
func errName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
	}
	return err.Error()
}
