package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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

// seccompChildEnv tells a re-executed test binary to install the filter and
// do what its value says.
const seccompChildEnv = "KURMA_TEST_SECCOMP_CHILD"

// seccompChild, in the re-executed test binary, installs the filter with
// no_new_privs (so no privilege is needed) and then makes an x32 getpid
// ("x32") or executes a program ("exec:<path>").
func seccompChild(mode string) {
	runtime.LockOSThread() // no_new_privs is per thread
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_NO_NEW_PRIVS:", err)
		os.Exit(3)
	}
	if err := InstallSeccomp(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	if mode == "allowlists" {
		allowlistsChild()
	}
	if path, ok := strings.CutPrefix(mode, "exec:"); ok {
		err := syscall.Exec(path, []string{path}, nil)
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(3)
	}
	_, _, e := unix.Syscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
	fmt.Fprintln(os.Stderr, "survived an x32 getpid:", e)
	os.Exit(0)
}

// wantKilledBySIGSYS runs test (this test binary's) in a child under the
// filter doing mode, and fails unless the filter killed it.
func wantKilledBySIGSYS(t *testing.T, test, mode string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), seccompChildEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want killed by SIGSYS\n%s", err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Fatalf("child: %v, want killed by SIGSYS\n%s", err, out)
	}
}

// An x32 system call (a native number with bit 30 set, which the filter's
// number checks would not match) kills the process, as docs/security.md
// says, rather than reach a denied call under another number.
func TestX32SyscallKills(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("x32 system calls exist on amd64 only, not %s", runtime.GOARCH)
	}
	if mode := os.Getenv(seccompChildEnv); mode != "" {
		seccompChild(mode)
	}
	wantKilledBySIGSYS(t, "TestX32SyscallKills", "x32")
}

// A 32-bit x86 program's first system call (int 0x80, another ABI with
// other numbers) kills it under the filter; run without the filter, the
// same program exits 0.
func TestI386SyscallKills(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("a 32-bit x86 program runs on amd64 only, not %s", runtime.GOARCH)
	}
	if mode := os.Getenv(seccompChildEnv); mode != "" {
		seccompChild(mode)
	}
	prog := i386Exit0(t)
	if err := exec.Command(prog).Run(); errors.Is(err, syscall.ENOEXEC) {
		t.Skipf("route skipped: this kernel runs no 32-bit x86 programs (no IA32 emulation): %v", err)
	} else if err != nil {
		t.Fatalf("the 32-bit program without the filter: %v", err)
	}
	wantKilledBySIGSYS(t, "TestI386SyscallKills", "exec:"+prog)
}

// i386Exit0 writes a minimal 32-bit x86 ELF executable that calls exit(0)
// with int 0x80, and returns its path.
func i386Exit0(t *testing.T) string {
	t.Helper()
	code := []byte{0xb8, 1, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80} // mov eax, 1 (exit); xor ebx, ebx; int 0x80
	const base, ehsize, phsize = 0x08048000, 52, 32
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0} // ELFCLASS32, little-endian, version 1
	b = le.AppendUint16(b, 2)                                            // ET_EXEC
	b = le.AppendUint16(b, 3)                                            // EM_386
	b = le.AppendUint32(b, 1)                                            // version
	b = le.AppendUint32(b, base+ehsize+phsize)                           // entry
	b = le.AppendUint32(b, ehsize)                                       // program headers' offset
	b = le.AppendUint32(b, 0)                                            // section headers' offset
	b = le.AppendUint32(b, 0)                                            // flags
	for _, v := range []uint16{ehsize, phsize, 1, 0, 0, 0} {             // sizes, one program header, no sections
		b = le.AppendUint16(b, v)
	}
	size := uint32(ehsize + phsize + len(code))
	for _, v := range []uint32{1, 0, base, base, size, size, 5, 0x1000} { // PT_LOAD of the whole file, R+X
		b = le.AppendUint32(b, v)
	}
	b = append(b, code...)
	path := filepath.Join(t.TempDir(), "exit0-i386")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// allowlistsChild, under the filter, tries ioctl requests and netlink
// families on and off the allowlists and prints each outcome as
// "name=errno" lines, then exits 0.
func allowlistsChild() {
	f, err := os.CreateTemp("", "kt-ioctl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	defer os.Remove(f.Name())
	fd := int(f.Fd())
	ioctl := func(cmd uint64) error {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), 0)
		if e != 0 {
			return e
		}
		return nil
	}
	sock := func(proto int) error {
		s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err == nil {
			unix.Close(s)
		}
		return err
	}
	for _, o := range []struct {
		name string
		err  error
	}{
		{"TCGETS", ioctl(unix.TCGETS)},
		{"FIFREEZE", ioctl(fifreeze)},
		{"FIFREEZE high bits", ioctl(fifreeze | 1<<32)},
		{"TCGETS high bits", ioctl(unix.TCGETS | 1<<32)},
		{"FS_IOC_GETFLAGS", ioctl(unix.FS_IOC_GETFLAGS)},
		{"NETLINK_ROUTE", sock(unix.NETLINK_ROUTE)},
		{"NETLINK_KOBJECT_UEVENT", sock(unix.NETLINK_KOBJECT_UEVENT)},
		{"NETLINK_AUDIT", sock(unix.NETLINK_AUDIT)},
		{"AF_INET", func() error {
			s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err == nil {
				unix.Close(s)
			}
			return err
		}()},
	} {
		name := "ok"
		var e syscall.Errno
		if errors.As(o.err, &e) {
			name = unix.ErrnoName(e)
		}
		fmt.Printf("%s=%s\n", o.name, name)
	}
	os.Exit(0)
}

// Under the filter an ioctl off the allowlist fails with EPERM (the high
// half of the request, which the kernel ignores, changes nothing), one on
// it reaches the file (ENOTTY: a regular file is no terminal), and a
// netlink socket opens for an allowed family only; other sockets are not
// the filter's business.
func TestAllowlists(t *testing.T) {
	if mode := os.Getenv(seccompChildEnv); mode != "" {
		seccompChild(mode)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAllowlists$")
	cmd.Env = append(os.Environ(), seccompChildEnv+"=allowlists")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	for k, want := range map[string]string{
		"TCGETS": "ENOTTY", "TCGETS high bits": "ENOTTY", "FIFREEZE": "EPERM", "FIFREEZE high bits": "EPERM",
		"FS_IOC_GETFLAGS": "EPERM", "NETLINK_ROUTE": "ok", "NETLINK_KOBJECT_UEVENT": "EPERM", "NETLINK_AUDIT": "EPERM",
		"AF_INET": "ok",
	} {
		if got[k] != want {
			t.Errorf("%s: %s, want %s", k, got[k], want)
		}
	}
}

// fifreeze is FIFREEZE, _IOWR('X', 119, int), which x/sys/unix does not
// name.
const fifreeze = 0xc0045877
