package netnsfile_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// TestNetnsNoThreadLeftInside creates and removes namespaces concurrently
// and checks that no OS thread of the process stays in one of them.
func TestNetnsNoThreadLeftInside(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 16)
	var wg sync.WaitGroup
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("ktp-ns%d", i))
		t.Cleanup(func() { _ = netnsfile.Remove(paths[i]) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := netnsfile.Create(paths[i]); err != nil {
				t.Error(err)
				return
			}
			if err := netnsfile.LoopbackUp(paths[i]); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	checkNoThreadIn(t, host)
	for _, p := range paths {
		if !netnsfile.IsMounted(p) {
			t.Fatalf("%s is not a mounted netns", p)
		}
		h, err := netns.GetFromPath(p)
		if err != nil {
			t.Fatal(err)
		}
		nl, err := netlink.NewHandleAt(h)
		if err != nil {
			t.Fatal(err)
		}
		lo, err := nl.LinkByName("lo")
		if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s: lo not up: %v", p, err)
		}
		nl.Close()
		h.Close()
		if err := netnsfile.Remove(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists", p)
		}
		if err := netnsfile.Remove(p); err != nil {
			t.Errorf("second remove: %v", err)
		}
	}
	if err := netnsfile.Create(paths[0]); err != nil {
		t.Fatal(err)
	}
	if err := netnsfile.Create(paths[0]); err == nil {
		t.Error("createNetns over an existing netns succeeded")
	}
	if !netnsfile.IsMounted(paths[0]) {
		t.Error("a failed createNetns removed the existing netns")
	}
}

// TestOpenRefusesPlantings: Open (and so IsMounted, LoopbackUp and Remove's
// link flush) accepts only a bind-mounted network namespace other than the
// process's own, never follows a symlink, and does not block on a FIFO.
func TestOpenRefusesPlantings(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	pod := filepath.Join(dir, "pod")
	if err := netnsfile.Create(pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netnsfile.Remove(pod) })
	own := filepath.Join(dir, "own")
	if err := os.WriteFile(own, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/net", own, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(own, unix.MNT_DETACH) })
	mnt := filepath.Join(dir, "mnt")
	if err := os.WriteFile(mnt, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/uts", mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	for name, target := range map[string]string{"link-pod": pod, "link-own": "/proc/self/ns/net"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := netnsfile.Open(pod); err != nil {
		t.Errorf("a pod netns: %v", err)
	} else {
		f.Close()
	}
	for _, name := range []string{"own", "mnt", "link-pod", "link-own", "fifo", "file", "."} {
		f, err := netnsfile.Open(filepath.Join(dir, name))
		if !errors.Is(err, netnsfile.ErrNotPodNetns) {
			t.Errorf("%s: got %v, want ErrNotPodNetns", name, err)
		}
		if f != nil {
			f.Close()
		}
	}
	if _, err := netnsfile.Open(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent: got %v", err)
	}
}

// checkNoThreadIn fails t for each OS thread of the process that is not in
// the network namespace host (a /proc/self/ns/net link).
func checkNoThreadIn(t *testing.T, host string) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if err == nil && ns != host {
			t.Errorf("thread %s is in %s, not the host's %s", task.Name(), ns, host)
		}
	}
}
