package netnsfile_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// TestBindExisting: a runtime's namespace, named as runtimes name them (a
// bind mount of theirs, /proc/<pid>/ns/net), is bind-mounted at kurma's
// path; Unbind removes only that mount and file: the runtime's links and
// its own file stay. The mount keeps the namespace after its process died.
func TestBindExisting(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()

	t.Run("runtime's netns file", func(t *testing.T) {
		src := testutil.NewNetnsFile(t, filepath.Join(dir, "ktp-rt0"))
		testutil.AddLinksIn(t, src, "ktprt0")
		dst := filepath.Join(dir, "ktp-kurma0")
		if err := netnsfile.BindExisting(src, dst); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netnsfile.Unbind(dst) })
		if !sameFile(t, src, dst) {
			t.Fatal("the bind mount is not the runtime's namespace")
		}
		if !netnsfile.IsMounted(dst) {
			t.Fatal("IsMounted(dst) = false")
		}
		if err := netnsfile.Unbind(dst); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(dst); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Unbind", dst)
		}
		links, err := netnsfile.Links(src)
		if err != nil || !slices.Contains(links, "ktprt0") {
			t.Errorf("the runtime's namespace lost its link: %v, %v", links, err)
		}
		if err := netnsfile.Unbind(dst); err != nil {
			t.Errorf("second Unbind: %v", err)
		}
	})

	t.Run("/proc/PID/ns/net outlives its process", func(t *testing.T) {
		cmd := exec.Command("unshare", "--net", "sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		src := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
		testutil.WaitFor(t, 10*time.Second, "unshare to enter its namespace", func() error {
			if sameFile(t, src, "/proc/self/ns/net") {
				return errors.New("still in ours")
			}
			return nil
		})
		dst := filepath.Join(dir, "ktp-kurma1")
		if err := netnsfile.BindExisting(src, dst); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netnsfile.Unbind(dst) })
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if _, err := netnsfile.Links(dst); err != nil {
			t.Errorf("the namespace is gone with its process: %v", err)
		}
	})

	t.Run("refused", func(t *testing.T) {
		plain := filepath.Join(dir, "plain")
		if err := os.WriteFile(plain, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, src := range []string{"/proc/self/ns/net", "/proc/self/ns/mnt", plain} {
			dst := filepath.Join(dir, "ktp-refused")
			err := netnsfile.BindExisting(src, dst)
			if err == nil {
				_ = netnsfile.Unbind(dst)
			}
			if !errors.Is(err, netnsfile.ErrNotPodNetns) {
				t.Errorf("BindExisting(%s) = %v, want ErrNotPodNetns", src, err)
			}
			if _, err := os.Lstat(dst); !os.IsNotExist(err) {
				t.Errorf("BindExisting(%s) left %s", src, dst)
			}
		}
	})
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// TestIdentify: a namespace's ID is the same through every path naming it
// (the runtime's file, kurmad's bind mount) and differs from another's; a
// path naming none (gone, a plain file, a file left after its unmount) is
// ErrNoNetns; BindExistingAs mounts only the namespace asked for.
func TestIdentify(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	src := testutil.NewNetnsFile(t, filepath.Join(dir, "ktp-id0"))
	other := testutil.NewNetnsFile(t, filepath.Join(dir, "ktp-id1"))
	id, err := netnsfile.IdentifyExisting(src)
	if err != nil || id.IsZero() {
		t.Fatalf("IdentifyExisting = %v, %v", id, err)
	}
	dst := filepath.Join(dir, "ktp-idbind")
	if err := netnsfile.BindExistingAs(src, dst, id); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netnsfile.Unbind(dst) })
	if got, err := netnsfile.IdentifyMounted(dst); err != nil || got != id {
		t.Errorf("IdentifyMounted(bind) = %v, %v; want %v", got, err, id)
	}
	if got, err := netnsfile.Identify(other); err != nil || got == id {
		t.Errorf("Identify(another namespace) = %v, %v; want an ID other than %v", got, err, id)
	}
	otherID, _ := netnsfile.Identify(other)
	dst2 := filepath.Join(dir, "ktp-idbind2")
	if err := netnsfile.BindExistingAs(src, dst2, otherID); !errors.Is(err, netnsfile.ErrOtherNetns) {
		t.Errorf("BindExistingAs(wrong ID) = %v, want ErrOtherNetns", err)
	}
	if _, err := os.Lstat(dst2); !os.IsNotExist(err) {
		t.Errorf("BindExistingAs(wrong ID) left %s", dst2)
	}

	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(src, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{src, plain, filepath.Join(dir, "gone"), filepath.Join(plain, "x")} {
		if _, err := netnsfile.Identify(p); !errors.Is(err, netnsfile.ErrNoNetns) {
			t.Errorf("Identify(%s) = %v, want ErrNoNetns", p, err)
		}
	}
	if got, err := netnsfile.IdentifyMounted(dst); err != nil || got != id {
		t.Errorf("the bind mount after the runtime's file went: %v, %v; want the namespace %v alive", got, err, id)
	}
}
