package netnsfile_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// TestPoolCreate takes more namespaces from a pool, concurrently, than it
// keeps ready: each is a namespace of its own, not the host's, with lo up,
// no OS thread is left in one, and the pool is full again once its
// refill is over; Close releases what it held and Create still works.
func TestPoolCreate(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	const size = 3
	p := netnsfile.NewPool(size)
	t.Cleanup(p.Close)
	waitReady(t, p, size)

	paths := make([]string, 2*size+1)
	var wg sync.WaitGroup
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("ktp-pool%d", i))
		t.Cleanup(func() { _ = netnsfile.Remove(paths[i]) })
		wg.Go(func() {
			if err := p.Create(paths[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	seen := map[string]string{}
	for _, path := range paths {
		if !netnsfile.IsMounted(path) {
			t.Fatalf("%s is not a mounted pod netns", path)
		}
		id, err := netnsfile.Identify(path)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint(id)
		if other, ok := seen[key]; ok {
			t.Errorf("%s and %s are the same namespace", path, other)
		}
		seen[key] = path
		h, err := netnsfile.Handle(path)
		if err != nil {
			t.Fatal(err)
		}
		lo, err := h.LinkByName("lo")
		h.Close()
		if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s: lo not up: %v", path, err)
		}
	}
	// Once the refill is over (its thread enters each namespace it makes),
	// no thread is left in one.
	waitReady(t, p, size)
	checkNoThreadIn(t, host)

	p.Close()
	if n := p.Ready(); n != 0 {
		t.Errorf("after Close the pool holds %d namespaces", n)
	}
	after := filepath.Join(dir, "ktp-pool-after")
	t.Cleanup(func() { _ = netnsfile.Remove(after) })
	if err := p.Create(after); err != nil || !netnsfile.IsMounted(after) {
		t.Fatalf("Create after Close: %v", err)
	}
	if err := p.Create(after); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create on an existing path: %v, want it to exist", err)
	}
}

// TestRelease removes a namespace's file at once and its links only when
// flush runs.
func TestRelease(t *testing.T) {
	testutil.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "ktp-release")
	if err := netnsfile.NewPool(0).Create(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netnsfile.Remove(path) })
	h, err := netnsfile.Handle(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ktp-veth0"}, PeerName: "ktp-veth1"}); err != nil {
		t.Fatal(err)
	}
	flush, err := netnsfile.Release(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Release: %v", path, err)
	}
	if _, err := h.LinkByName("ktp-veth0"); err != nil {
		t.Fatalf("the veth is gone before flush: %v", err)
	}
	flush()
	if _, err := h.LinkByName("ktp-veth0"); err == nil {
		t.Error("the veth link is still there after flush")
	}
}

// waitReady waits until p holds n namespaces.
func waitReady(t *testing.T, p *netnsfile.Pool, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("the pool to hold %d namespaces", n), func() error {
		if got := p.Ready(); got != n {
			return fmt.Errorf("it holds %d", got)
		}
		return nil
	})
}
