package networkpod

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
)

func TestParseCNIError(t *testing.T) {
	tests := []struct {
		out  string
		code uint
		ok   bool
	}{
		{`{"cniVersion":"1.0.0","code":7,"msg":"bad","details":"d"}`, 7, true},
		{`{"code":0,"msg":""}`, 0, true},
		{`{"cniVersion":"1.0.0","ips":[]}`, 0, false},
		{`not json`, 0, false},
		{``, 0, false},
	}
	for _, tt := range tests {
		e := parseCNIError([]byte(tt.out))
		if (e != nil) != tt.ok || (e != nil && e.Code != tt.code) {
			t.Errorf("parseCNIError(%q) = %+v", tt.out, e)
		}
	}
}

func TestTail(t *testing.T) {
	if got := tail("abcdef", 3); got != "…def" {
		t.Errorf("got %q", got)
	}
	if got := tail("ab", 3); got != "ab" {
		t.Errorf("got %q", got)
	}
}

// The leak checks of the e2e, soak and bench suites find a daemon's
// cgroups through testutil.CgroupParent: it must name the same directory.
func TestCgroupParentMatchesTestutil(t *testing.T) {
	for _, dir := range []string{"/tmp/kte-123/run", "/run/kurma-demo"} {
		if got, want := testutil.CgroupParent(dir), defaultCgroupParent(dir); got != want {
			t.Errorf("testutil.CgroupParent(%q) = %q, networkpod uses %q", dir, got, want)
		}
	}
}

// TestMainExitWording: the main's end as the agent reports it reads as it
// did when libcontainer reaped the main (os.ProcessState's words), for an
// exit code and for a signal.
func TestMainExitWording(t *testing.T) {
	for _, script := range []string{"exit 3", "kill -KILL $$", "kill -TERM $$"} {
		err := exec.Command("/bin/sh", "-c", script).Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s: %v", script, err)
		}
		got := mainExit{unix.WaitStatus(ee.Sys().(syscall.WaitStatus))}
		if got.Error() != ee.Error() || got.ExitCode() != ee.ExitCode() {
			t.Errorf("%s: %q (code %d), want %q (code %d)", script, got.Error(), got.ExitCode(), ee.Error(), ee.ExitCode())
		}
	}
}
