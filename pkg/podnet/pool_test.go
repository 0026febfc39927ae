package podnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// poolManager is the fixture's Manager with a netns pool in poolDir.
func (f *fixture) poolManager(t *testing.T, poolDir string) *Manager {
	t.Helper()
	log := logrus.New()
	log.SetOutput(testutil.LogWriter(t))
	m, err := New(Options{Config: f.cfg, Exec: f.exec, Store: f.store, NetnsDir: f.netns, PodsDir: f.pods,
		PoolDir: poolDir, Serving: servingOf(f.cfg), HostResolvConf: f.hostDNS,
		TeardownTimeout: 10 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// poolCount is the number of mounted namespaces in dir, and of entries.
func poolCount(t *testing.T, dir string) (mounted, entries int) {
	t.Helper()
	en, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range en {
		if netnsfile.IsMounted(filepath.Join(dir, e.Name())) {
			mounted++
		}
	}
	return mounted, len(en)
}

// TestNetnsPool: New clears what a killed kurmad left in the pool's dir
// and fills it; a create takes a namespace from it (its netns is one with
// lo up, the pod is whole and deletes cleanly) and the pool fills back;
// Close empties it and leaves the pods' namespaces alone.
func TestNetnsPool(t *testing.T) {
	f := newFixture(t, newFakeExec())
	poolDir := filepath.Join(t.TempDir(), "pool")
	if err := os.MkdirAll(poolDir, 0o700); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(poolDir, uuid.NewString())
	if err := netnsfile.Create(left); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netnsfile.Remove(left) })
	m := f.poolManager(t, poolDir)
	if netnsfile.IsMounted(left) {
		t.Error("New kept a namespace a previous kurmad left in the pool")
	}
	if n, e := poolCount(t, poolDir); n != PoolSize || e != PoolSize {
		t.Fatalf("pool after New: %d mounted of %d entries, want %d", n, e, PoolSize)
	}

	ctx := context.Background()
	p, err := m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	assertLoUp(t, p.Netns)
	testutil.WaitFor(t, 10*time.Second, "the pool to fill back", func() error {
		if n, e := poolCount(t, poolDir); n != PoolSize || e != PoolSize {
			return fmt.Errorf("%d mounted of %d entries", n, e)
		}
		return nil
	})
	p2, err := m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, e := poolCount(t, poolDir); e != 0 {
		t.Errorf("pool after Close: %d entries, want none", e)
	}
	for _, pod := range []*Pod{p, p2} {
		if !netnsfile.IsMounted(pod.Netns) {
			t.Errorf("Close removed pod %s's netns", pod.ID)
		}
		if err := m.Delete(ctx, pod.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{f.netns, f.pods} {
		if en, _ := os.ReadDir(d); len(en) != 0 {
			t.Errorf("%s holds %d entries after the deletes", d, len(en))
		}
	}
}

// assertLoUp checks that path is a mounted netns whose lo is up.
func assertLoUp(t *testing.T, path string) {
	t.Helper()
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	lo, err := nl.LinkByName("lo")
	if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("%s: lo not up (%v)", path, err)
	}
}
