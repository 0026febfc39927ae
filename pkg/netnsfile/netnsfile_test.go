package netnsfile_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

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
