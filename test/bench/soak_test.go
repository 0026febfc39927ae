package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// The soak test's own bridge and /18 of the bench's 10.206.0.0/16, so it
// never meets a `make bench` running at the same time (that uses
// kt-bench0..2 and the first three /18s).
var soakNet = netSpec{Name: "soak", Bridge: "kt-bench3", Subnet: "10.206.192.0/18"}

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}

// buildDaemon builds kurmad, kurma-init and kurma-agent (networkpod finds
// them beside kurmad).
func buildDaemon(t *testing.T) string {
	t.Helper()
	testutil.Build(t, testutil.BuildOptions{}, "./cmd/kurma-agent")
	return filepath.Join(testutil.Build(t, testutil.BuildOptions{Cgo: true}, "./cmd/kurmad", "./cmd/kurma-init"), "kurmad")
}

// TestSoak creates and deletes 100 pods at 8 concurrent clients through a
// real kurmad and asserts that nothing is left: veths, netns files, pod
// dirs, mounts, host-local IPs, journal entries, cgroup dirs, goroutines;
// and that threads and RSS stay bounded.
func TestSoak(t *testing.T) {
	testutil.RequireRoot(t)
	aci := testutil.BuiltImage(t, "cni-netplugin.aci")
	bin := buildDaemon(t)

	dir, err := os.MkdirTemp("", "kbt-") // short: the API socket lives here
	if err != nil {
		t.Fatal(err)
	}
	bridges := []string{soakNet.Bridge}
	testutil.DeleteBridges(bridges)
	d, err := newDaemon(bin, filepath.Join(dir, "d"), aci, []netSpec{soakNet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kurmad log (last lines):\n%s", d.LogTail(40))
		}
		shutdown(d)
		testutil.UnmountUnder(dir)
		testutil.DeleteBridges(bridges)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.waitReady(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Warm up at the same concurrency so pools, threads and the heap
	// reach their working size before the baseline.
	if r := cycles(ctx, d, soakNet.Name, 16, 8); r.failures > 0 {
		t.Fatalf("warm-up: %d failed cycles: %s", r.failures, strings.Join(r.firstErrs, "; "))
	}
	base := takeBaseline(ctx, d)
	if base.goroutines < 0 {
		t.Fatalf("cannot count kurmad's goroutines through KURMAD_PPROF_SOCKET (cmd/kurmad/profile.go)")
	}

	start := time.Now()
	r := cycles(ctx, d, soakNet.Name, 100, 8)
	t.Logf("100 pods at 8 clients in %v (%.1f pods/s); create p50 %v p99 %v, delete p50 %v p99 %v",
		r.elapsed.Round(time.Millisecond), r.podsPerSec(), r.creates.pct(50), r.creates.pct(99), r.deletes.pct(50), r.deletes.pct(99))
	if r.failures > 0 {
		t.Errorf("%d of 100 cycles failed: %s", r.failures, strings.Join(r.firstErrs, "; "))
	}
	if ctx.Err() != nil {
		t.Fatalf("soak did not finish in time (%v)", time.Since(start))
	}

	lk := countLeaks(ctx, d, base, bridges)
	checks := []struct {
		what string
		n    int
	}{
		{"veths on " + soakNet.Bridge, lk.Veths},
		{"netns files", lk.NetnsFiles},
		{"pod dirs", lk.PodDirs},
		{"mounts beyond the baseline", lk.Mounts},
		{"host-local IP files", lk.IPFiles},
		{"journal entries", lk.Journal},
		{"cgroup dirs beyond the baseline", lk.Cgroups},
		{"goroutines beyond the baseline (HTTP connections not counted)", max(lk.Goroutines, 0)},
	}
	for _, c := range checks {
		if c.n != 0 {
			t.Errorf("leaked %s: %d", c.what, c.n)
		}
	}
	for _, s := range lk.Details {
		t.Log(s)
	}
	t.Logf("kurmad after the soak: %d goroutines (%d serving idle HTTP connections), threads %+d, RSS %.1f → %.1f MiB",
		lk.GoTotal, lk.HTTPConns, lk.Threads, mib(base.rssKiB), mib(lk.RSSKiB))
	// Threads grow only with concurrently blocked syscalls (8 clients, each
	// a plugin call and a journal write at most); a per-pod leak of 100 pods
	// would show far above this.
	if lk.Threads > 16 {
		t.Errorf("kurmad threads grew by %d over 100 pods (baseline %d)", lk.Threads, base.threads)
	}
	if growth := lk.RSSKiB - base.rssKiB; growth > 32<<10 {
		t.Errorf("kurmad RSS grew by %.1f MiB over 100 pods (%.1f → %.1f MiB)", mib(growth), mib(base.rssKiB), mib(lk.RSSKiB))
	}

	// The counters must see a pod that is there, or zero above means
	// nothing.
	pod, err := d.Client.CreatePod(ctx, apiCreate(soakNet.Name))
	if err != nil {
		t.Fatalf("create a live pod: %v", err)
	}
	live := countLeaks(ctx, d, base, bridges)
	for _, c := range []struct {
		what string
		n    int
	}{{"veths", live.Veths}, {"netns files", live.NetnsFiles}, {"mounts", live.Mounts}, {"IP files", live.IPFiles}, {"journal", live.Journal}} {
		if c.n < 1 {
			t.Errorf("with pod %s alive the %s counter reads %d", pod.ID, c.what, c.n)
		}
	}
	if err := d.Client.DeletePod(ctx, pod.ID); err != nil {
		t.Errorf("delete the live pod: %v", err)
	}

	// Stopped: nothing of it may stay mounted or in the cgroup tree.
	if err := d.Stop(45 * time.Second); err != nil {
		t.Error(err)
	}
	if ms := d.Mounts(); len(ms) > 0 {
		t.Errorf("mounts left after kurmad stopped: %v", ms)
	}
	if cg := d.CgroupDirs(); len(cg) > 0 {
		t.Errorf("cgroup dirs left after kurmad stopped: %v", cg)
	}
}

func apiCreate(network string) api.CreatePodRequest {
	return api.CreatePodRequest{Name: "soak-live", Networks: []string{network}}
}
