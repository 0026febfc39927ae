package networkpod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// TestHeldCall: a held call (netplugin.Call.HeldUntil) starts its process
// before its hold passes, gives it no config while the hold lasts, and its
// config once it passed; a hold that fails cancels the call (its process
// killed, never given its config) and the call's error is the hold's.
// kurmad syncs an add's intent this way while the add's processes start
// (podnet.syncHold).
func TestHeldCall(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kth", Image: toolImage(t, "main"), Config: []byte(`{"name":"kth"}`)})
	config := bytes.Repeat([]byte("c"), 100<<10) // more than a pipe holds

	type result struct {
		out []byte
		err error
	}
	call := func(token string, hold func() error) chan result {
		done := make(chan result, 1)
		go func() {
			out, _, err := p.Exec(context.Background(), testCall("kth", 0, "/bin/echo", []string{token}, config).HeldUntil(hold))
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
			t.Fatalf("the call answered while its hold lasted (%d bytes back, %v): its process got its config", len(r.out), r.err)
		case <-time.After(300 * time.Millisecond):
		}
		// Still there, waiting for its config (-1: it has ended).
		if rchar := readChars(t, pid); rchar < 0 || rchar >= 64<<10 {
			t.Errorf("process %d while its hold lasted: read %d bytes (-1: ended), want it waiting for its config", pid, rchar)
		}
		close(open)
		r := <-done
		if r.err != nil || !bytes.Equal(r.out, config) {
			t.Fatalf("after the hold passed: %d bytes back (want the %d-byte config), %v", len(r.out), len(config), r.err)
		}
	})

	t.Run("hold fails", func(t *testing.T) {
		errFull := errors.New("journal: no space left on device")
		open := make(chan struct{})
		done := call("kt-held-refused", func() error { <-open; return errFull })
		pid := waitForArg(t, "kt-held-refused", done)
		close(open)
		r := <-done
		if !errors.Is(r.err, errFull) || r.out != nil {
			t.Fatalf("got %d bytes, %v; want the hold's error and no output", len(r.out), r.err)
		}
		if rchar := readChars(t, pid); rchar >= 64<<10 {
			t.Errorf("the refused call's process read %d bytes", rchar)
		}
		// The call is cancelled: its process is killed, not left waiting
		// for a config.
		testutil.WaitFor(t, 10*time.Second, "the refused call's process to end", func() error {
			if left := testutil.ProcessesWhere(hasArg("kt-held-refused")); len(left) > 0 {
				return fmt.Errorf("still running: %s", strings.Join(left, "; "))
			}
			return nil
		})
	})
}

// hasArg matches the processes (see testutil.ProcessesWhere) whose
// command line has arg as a whole argument.
func hasArg(arg string) func(cmdline, cgroup string) bool {
	return func(cmdline, _ string) bool { return slices.Contains(strings.Fields(cmdline), arg) }
}

// waitForArg waits for the process whose arguments include arg (a call's
// process, seen from the host) and returns its PID; it fails the test if
// done delivers first.
func waitForArg[T any](t *testing.T, arg string, done chan T) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, 20*time.Second, "the call's process (with argument "+arg+") while its hold lasted", func() error {
		select {
		case r := <-done:
			t.Fatalf("the call ended before its process was seen: %+v", r)
		default:
		}
		if pids := testutil.PIDsWhere(hasArg(arg)); len(pids) > 0 {
			pid = pids[0]
			return nil
		}
		return errors.New("none yet (one that got its config at once has ended already)")
	})
	return pid
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
