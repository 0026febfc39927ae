package k8snode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// mountNamespace starts a process in a mount namespace of its own, with
// private mounts, as a node without systemd has them, and returns the
// namespace's path and the process's pid; the process, and with it the
// namespace and its mounts, end with the test.
func mountNamespace(t *testing.T) (string, int) {
	t.Helper()
	testutil.RequireRoot(t)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self, _ := os.Readlink("/proc/self/ns/mnt")
	ns := fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid)
	testutil.WaitFor(t, 10*time.Second, "unshare to enter its namespace", func() error {
		if l, err := os.Readlink(ns); err != nil || l == self {
			return fmt.Errorf("namespace %q (%v)", l, err)
		}
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)); strings.TrimSpace(string(b)) != "sleep" {
			return errors.New("not exec'd sleep yet")
		}
		return nil
	})
	return ns, cmd.Process.Pid
}

// propagation is dir's mount in the namespace whose mountinfo is at
// mountinfo: its mount point and whether it is shared (the last mount on
// the longest mount point above dir, which is what lies on top).
func propagation(t *testing.T, mountinfo string, dir string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	best, shared := "", false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		mp := f[4]
		if !(mp == "/" || mp == dir || strings.HasPrefix(dir, mp+"/")) || len(mp) < len(best) {
			continue
		}
		best, shared = mp, strings.Contains(strings.Join(f[6:], " "), "shared:")
	}
	return best, shared
}

// TestMakeShared: in a namespace whose mounts are all private, a missing
// directory is made, bound on itself and made shared, and a mount point
// (here a tmpfs) is made shared in place; run again, it finds both shared
// and changes nothing. Our own namespace is untouched.
func TestMakeShared(t *testing.T) {
	ns, pid := mountNamespace(t)
	base := t.TempDir()
	plain := filepath.Join(base, "run", "kurma") // does not exist yet
	mounted := filepath.Join(base, "netns")      // a tmpfs in the namespace
	if err := os.Mkdir(mounted, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nsenter", "--mount="+ns, "mount", "-t", "tmpfs", "tmpfs", mounted).CombinedOutput(); err != nil {
		t.Fatalf("tmpfs in the namespace: %v: %s", err, out)
	}
	done, err := MakeShared(ns, []string{plain, mounted})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 2 || done[0].Made != "bind" || done[1].Made != "make-shared" {
		t.Errorf("MakeShared did %+v, want bind, then make-shared", done)
	}
	for _, d := range []string{plain, mounted} {
		if mp, shared := propagation(t, fmt.Sprintf("/proc/%d/mountinfo", pid), d); mp != d || !shared {
			t.Errorf("%s lies on %s (shared %v) in the namespace, want its own shared mount", d, mp, shared)
		}
		// This thread's: MakeShared's thread may have been the main one,
		// whose namespace /proc/<pid> shows (see MakeShared).
		if mp, _ := propagation(t, "/proc/thread-self/mountinfo", d); mp == d {
			t.Errorf("%s is a mount point in the test's own namespace", d)
		}
	}
	again, err := MakeShared(ns, []string{plain, mounted})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range again {
		if s.Made != "" {
			t.Errorf("second run: %+v, want nothing done", s)
		}
	}
	if _, err := MakeShared(filepath.Join(base, "nosuchns"), []string{plain}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("MakeShared of a missing namespace: %v", err)
	}
}

// TestMakeSharedHidden: a mount hidden under one made later on a parent
// (the host's /run/netns under a node's own tmpfs on /run) is not the
// directory's mount: the visible one is bound and made shared.
func TestMakeSharedHidden(t *testing.T) {
	ns, pid := mountNamespace(t)
	base := t.TempDir()
	run := filepath.Join(base, "run")
	netns := filepath.Join(run, "netns")
	if err := os.MkdirAll(netns, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("mount --bind %[1]s %[1]s && mount -t tmpfs tmpfs %[2]s", netns, run)
	if out, err := exec.Command("nsenter", "--mount="+ns, "sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	done, err := MakeShared(ns, []string{netns})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].Made != "bind" {
		t.Errorf("MakeShared did %+v, want a bind of the directory in the tmpfs", done)
	}
	if mp, shared := propagation(t, fmt.Sprintf("/proc/%d/mountinfo", pid), netns); mp != netns || !shared {
		t.Errorf("%s lies on %s (shared %v), want its own shared mount", netns, mp, shared)
	}
}
