package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// leaks counts what pods leave behind. The live counts are taken with
// kurmad running and compared against a baseline taken right after boot.
type leaks struct {
	Veths      int // veths enslaved to the bench's bridges
	NetnsFiles int // files in <run_dir>/netns
	PodDirs    int // dirs in <run_dir>/pods
	Mounts     int // mounts under the daemon's dir beyond the baseline
	IPFiles    int // host-local reservations
	Journal    int // pods GET /v1/pods lists
	Cgroups    int // cgroup dirs under the daemon's cgroup parent beyond the baseline
	Goroutines int // kurmad goroutines beyond the baseline, HTTP connections not counted (-1: unknown)
	GoTotal    int // kurmad goroutines now, all of them
	HTTPConns  int // of which serve an HTTP connection
	Threads    int // kurmad threads beyond the baseline
	RSSKiB     int64
	Details    []string
}

// baseline is what a freshly booted kurmad has before any pod.
type baseline struct {
	mounts, cgroups, goroutines int // goroutines: not counting HTTP connections
	threads, rssKiB             int64
}

func takeBaseline(ctx context.Context, d *daemon) baseline {
	b := baseline{mounts: len(d.Mounts()), cgroups: len(d.CgroupDirs()), goroutines: -1}
	if g, conns, err := d.goroutines(ctx); err == nil {
		b.goroutines = g - conns
	}
	b.rssKiB, b.threads, _ = procStatus(d.Pid())
	return b
}

// countLeaks counts, with kurmad running, what is left after every pod was
// deleted. Goroutines get a moment to wind down (HTTP keep-alives, timers).
func countLeaks(ctx context.Context, d *daemon, base baseline, bridges []string) leaks {
	var l leaks
	add := func(format string, args ...any) {
		if len(l.Details) < 20 {
			l.Details = append(l.Details, fmt.Sprintf(format, args...))
		}
	}
	// A delete removes its pod's dir just after its answer: give those a
	// moment too.
	objs := d.PodObjects(bridges)
	_ = testutil.Poll(ctx, 2*time.Second, "the deleted pods' dirs to go", func() error {
		if objs = d.PodObjects(bridges); len(objs.PodDirs) > 0 {
			return fmt.Errorf("%d pod dirs", len(objs.PodDirs))
		}
		return nil
	})
	for _, v := range objs.Veths {
		add("veth %s", v)
	}
	for _, f := range objs.NetnsFiles {
		add("netns/%s", filepath.Base(f))
	}
	for _, p := range objs.PodDirs {
		add("pods/%s", filepath.Base(p))
	}
	l.Veths, l.NetnsFiles, l.PodDirs = len(objs.Veths), len(objs.NetnsFiles), len(objs.PodDirs)
	if n := len(d.Mounts()) - base.mounts; n > 0 {
		l.Mounts = n
		add("%d mounts under %s beyond the %d after boot", n, d.Dir, base.mounts)
	}
	for _, f := range objs.Leases {
		add("lease %s", f)
	}
	l.IPFiles = len(objs.Leases)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	pods, err := d.Client.ListPods(cctx)
	cancel()
	if err != nil {
		l.Journal = -1
		add("GET /v1/pods: %v", err)
	}
	for _, p := range pods {
		l.Journal++
		add("journal pod %s (%s) %s", p.ID, p.Name, p.Error)
	}
	if n := len(d.CgroupDirs()) - base.cgroups; n > 0 {
		l.Cgroups = n
		add("%d cgroup dirs under %s beyond the %d after boot", n, testutil.CgroupParent(d.RunDir), base.cgroups)
	}
	l.Goroutines = -1
	if base.goroutines >= 0 {
		// Exec-agent calls and timers end on their own: give them 2s
		// before calling anything a leak.
		var gerr error
		_ = testutil.Poll(ctx, 2*time.Second, "kurmad's goroutines to settle", func() error {
			g, conns, err := d.goroutines(ctx)
			if err != nil {
				gerr = err
				return nil
			}
			l.GoTotal, l.HTTPConns = g, conns
			l.Goroutines = g - conns - base.goroutines
			if l.Goroutines > 0 {
				return fmt.Errorf("%d beyond the baseline", l.Goroutines)
			}
			return nil
		})
		if gerr != nil {
			add("goroutines: %v", gerr)
		}
	}
	rss, threads, _ := procStatus(d.Pid())
	l.RSSKiB = rss
	l.Threads = int(threads - base.threads)
	return l
}

// total is the number of leaked kernel objects and journal entries (not
// goroutines, threads or memory, which are judged separately).
func (l leaks) total() int {
	return l.Veths + l.NetnsFiles + l.PodDirs + l.Mounts + l.IPFiles + abs(l.Journal) + l.Cgroups
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
