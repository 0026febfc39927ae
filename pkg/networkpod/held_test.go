package networkpod

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// TestHeldCall: a call whose context carries a stdin gate starts its
// process before the gate opens, gives it no config while the gate is
// closed, and its config once the gate opens; a gate that fails cancels
// the call (its process killed, never given its config) and the call's
// error is the gate's. kurmad syncs an add's intent this way while the
// add's processes start (podnet.syncGate).
func TestHeldCall(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kth", Image: toolImage(t, "main"), Config: []byte(`{"name":"kth"}`)})
	config := bytes.Repeat([]byte("c"), 100<<10) // more than a pipe holds

	type result struct {
		out []byte
		err error
	}
	call := func(token string, gate func() error) chan result {
		done := make(chan result, 1)
		go func() {
			out, _, err := p.Exec(netplugin.WithStdinGate(context.Background(), gate), "kth", 0, "/bin/echo", []string{token}, config)
			done <- result{out, err}
		}()
		return done
	}

	t.Run("released", func(t *testing.T) {
		open := make(chan struct{})
		done := call("kt-held-released", func() error { <-open; return nil })
		pid := waitForArg(t, "kt-held-released", done)
		select {
		case r := <-done:
			close(open)
			t.Fatalf("the call answered while its gate was closed (%d bytes back, %v): its process got its config", len(r.out), r.err)
		case <-time.After(300 * time.Millisecond):
		}
		if rchar := readChars(t, pid); rchar >= 64<<10 {
			t.Errorf("process %d read %d bytes while its gate was closed", pid, rchar)
		}
		close(open)
		r := <-done
		if r.err != nil || !bytes.Equal(r.out, config) {
			t.Fatalf("after the gate opened: %d bytes back (want the %d-byte config), %v", len(r.out), len(config), r.err)
		}
	})

	t.Run("gate fails", func(t *testing.T) {
		errFull := errors.New("journal: no space left on device")
		open := make(chan struct{})
		done := call("kt-held-refused", func() error { <-open; return errFull })
		pid := waitForArg(t, "kt-held-refused", done)
		close(open)
		r := <-done
		if !errors.Is(r.err, errFull) || r.out != nil {
			t.Fatalf("got %d bytes, %v; want the gate's error and no output", len(r.out), r.err)
		}
		if rchar := readChars(t, pid); rchar >= 64<<10 {
			t.Errorf("the refused call's process read %d bytes", rchar)
		}
		// The call is cancelled: its process is killed, not left waiting
		// for a config.
		deadline := time.Now().Add(10 * time.Second)
		for processAlive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the refused call still runs", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// waitForArg waits for the process whose arguments include arg (a call's
// process, seen from the host) and returns its PID; it fails the test if
// done delivers first.
func waitForArg[T any](t *testing.T, arg string, done chan T) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case r := <-done:
			t.Fatalf("the call ended before its process was seen: %+v", r)
		default:
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			b, err := os.ReadFile(f)
			if err != nil || !bytes.Contains(b, []byte("\x00"+arg+"\x00")) {
				continue
			}
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no process with argument %s while its gate was closed (one that got its config at once has ended already)", arg)
	return 0
}

// readChars is what pid read so far (rchar of /proc/<pid>/io), or -1 when
// it is gone.
func readChars(t *testing.T, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no rchar in /proc/%d/io", pid)
	return 0
}

// processAlive is whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
