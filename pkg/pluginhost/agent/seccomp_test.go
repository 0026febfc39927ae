package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netconfig"
)

// allow_syscalls accepts exactly the names the filter denies: a name
// netconfig accepts that the filter does not know would stop the network
// at start, and a denied call netconfig does not accept could never be
// consented to.
func TestDeniedSyscallsMatchConfig(t *testing.T) {
	if got, want := DeniedSyscalls(), netconfig.DeniedSyscalls(); !slices.Equal(got, want) {
		t.Errorf("filter denies %v\nallow_syscalls takes %v", got, want)
	}
}

// Each consent lifts exactly its call, and a held capability its gated
// calls; an unknown name is refused.
func TestPolicy(t *testing.T) {
	p, err := newPolicy(FilterOptions{Allow: []string{"keyctl", "unshare"}}, 1<<unix.CAP_SYS_MODULE)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deniedSyscalls {
		allowed := d.name == "keyctl" || d.cap == unix.CAP_SYS_MODULE
		if slices.Contains(p.deny, d.nr) == allowed {
			t.Errorf("%s: denied = %v", d.name, !allowed)
		}
	}
	if len(p.newUserNS) != 1 || p.newUserNS[0] != newUserNSCalls[0].nr {
		t.Errorf("user namespace rule on %v; want clone only", p.newUserNS)
	}
	if _, err := newPolicy(FilterOptions{Allow: []string{"read"}}, 0); err == nil {
		t.Error("allow_syscalls read accepted")
	}
}

// An x32 system call (a native number with bit 30 set, which the filter's
// number checks would not match) kills the process, as docs/security.md
// says, rather than reach a denied call under another number. The child
// sets no_new_privs, so this needs no privilege.
func TestX32SyscallKills(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("x32 system calls exist on amd64 only, not %s", runtime.GOARCH)
	}
	const childEnv = "KURMA_TEST_SECCOMP_CHILD"
	if os.Getenv(childEnv) == "x32" {
		runtime.LockOSThread() // no_new_privs is per thread
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "PR_SET_NO_NEW_PRIVS:", err)
			os.Exit(3)
		}
		if err := InstallSeccomp(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		_, _, e := unix.Syscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		fmt.Fprintln(os.Stderr, "survived an x32 getpid:", e)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestX32SyscallKills$")
	cmd.Env = append(os.Environ(), childEnv+"=x32")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want killed by SIGSYS\n%s", err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Fatalf("child: %v, want killed by SIGSYS\n%s", err, out)
	}
}
