package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// peekReport is where the main executable of the peek attack leaves what
// it reached of a running call.
const peekReport = "/var/lib/cni/hostile-peek.json"

// peekCall is the peek attack's add: it enters its pod's network
// namespace (on the thread /proc/<pid>/ns/net shows) and waits, up to 30
// s, until the main executable has reported on it.
func peekCall(netns string) map[string]string {
	r := map[string]string{}
	runtime.LockOSThread() // the main goroutine: the process's main thread (see init)
	fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
	}
	r["enter its pod"] = outcome(err)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(peekReport); err == nil {
			r["main reported"] = "yes"
			return r
		}
	}
	r["main reported"] = "no"
	return r
}

// peekMain is the peek attack's main executable: it waits for a call's add
// (a process whose argv[0] is /opt/network/add) and tries to reach the
// pod the add is for through the add's /proc: the netns dir in its root,
// the pod's netns file there, its network namespace, a setns through its
// pidfd, a descriptor of its. It writes what it got to peekReport.
func peekMain(netnsDir string) {
	r := map[string]string{}
	pid := 0
	for pid == 0 {
		procs, _ := os.ReadDir("/proc")
		for _, e := range procs {
			n, err := strconv.Atoi(e.Name())
			if err != nil || n == os.Getpid() {
				continue
			}
			b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if argv := strings.Split(string(b), "\x00"); len(argv) > 2 && argv[0] == "/opt/network/add" {
				pid = n
				r["pod"] = filepath.Base(argv[1])
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	if entries, err := os.ReadDir(filepath.Join(proc, "root", netnsDir)); err != nil {
		r["list the call's netns dir"] = outcome(err)
	} else {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		r["list the call's netns dir"] = strings.Join(names, ",")
	}
	r["open the pod's netns through the call's root"] = outcome(openClose(filepath.Join(proc, "root", netnsDir, r["pod"]), os.O_RDONLY))
	r["open the call's ns/net"] = outcome(openClose(filepath.Join(proc, "ns", "net"), os.O_RDONLY))
	r["open the call's stdout"] = outcome(openClose(filepath.Join(proc, "fd", "1"), os.O_RDONLY))
	if pfd, err := unix.PidfdOpen(pid, 0); err != nil {
		r["setns through the call's pidfd"] = outcome(err)
	} else {
		runtime.LockOSThread() // a thread that may end up in the pod: never unlocked, dies with the process
		r["setns through the call's pidfd"] = outcome(unix.Setns(pfd, unix.CLONE_NEWNET))
		unix.Close(pfd)
	}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(peekReport+".tmp", b, 0o644); err == nil {
		_ = os.Rename(peekReport+".tmp", peekReport)
	}
}
