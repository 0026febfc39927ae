package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

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
	b := baseline{mounts: len(testutil.MountsUnder(d.dir)), cgroups: len(cgroupDirs(d.runDir)), goroutines: -1}
	if g, conns, err := d.goroutines(ctx); err == nil {
		b.goroutines = g - conns
	}
	b.rssKiB, b.threads, _ = procStatus(d.pid())
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
	for _, v := range bridgeVeths(bridges) {
		l.Veths++
		add("veth %s", v)
	}
	for _, sub := range []string{"netns", "pods"} {
		entries, _ := os.ReadDir(filepath.Join(d.runDir, sub))
		for _, e := range entries {
			if sub == "netns" {
				l.NetnsFiles++
			} else {
				l.PodDirs++
			}
			add("%s/%s", sub, e.Name())
		}
	}
	if n := len(testutil.MountsUnder(d.dir)) - base.mounts; n > 0 {
		l.Mounts = n
		add("%d mounts under %s beyond the %d after boot", n, d.dir, base.mounts)
	}
	for _, f := range testutil.HostLocalLeases(d.stateDir) {
		l.IPFiles++
		add("lease %s", f)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	pods, err := d.client.ListPods(cctx)
	cancel()
	if err != nil {
		l.Journal = -1
		add("GET /v1/pods: %v", err)
	}
	for _, p := range pods {
		l.Journal++
		add("journal pod %s (%s) %s", p.ID, p.Name, p.Error)
	}
	if n := len(cgroupDirs(d.runDir)) - base.cgroups; n > 0 {
		l.Cgroups = n
		add("%d cgroup dirs under %s beyond the %d after boot", n, testutil.CgroupParent(d.runDir), base.cgroups)
	}
	l.Goroutines = -1
	if base.goroutines >= 0 {
		// Exec-agent calls and timers end on their own; poll a little
		// before calling anything a leak.
		for i := 0; i < 20; i++ {
			g, conns, err := d.goroutines(ctx)
			if err != nil {
				add("goroutines: %v", err)
				break
			}
			l.GoTotal, l.HTTPConns = g, conns
			l.Goroutines = g - conns - base.goroutines
			if l.Goroutines <= 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	rss, threads, _ := procStatus(d.pid())
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

// bridgeVeths lists veths whose master is one of bridges.
func bridgeVeths(bridges []string) []string {
	links, err := netlink.LinkList()
	if err != nil {
		return []string{"netlink: " + err.Error()}
	}
	masters := map[int]string{}
	for _, l := range links {
		if slices.Contains(bridges, l.Attrs().Name) {
			masters[l.Attrs().Index] = l.Attrs().Name
		}
	}
	var out []string
	for _, l := range links {
		if b, ok := masters[l.Attrs().MasterIndex]; ok && l.Type() == "veth" {
			out = append(out, l.Attrs().Name+" on "+b)
		}
	}
	return out
}

// deleteBridges removes the bench's bridges and every veth on them.
func deleteBridges(bridges []string) {
	links, _ := netlink.LinkList()
	masters := map[int]bool{}
	for _, l := range links {
		if slices.Contains(bridges, l.Attrs().Name) {
			masters[l.Attrs().Index] = true
		}
	}
	for _, l := range links {
		if masters[l.Attrs().MasterIndex] && l.Type() == "veth" {
			_ = netlink.LinkDel(l)
		}
	}
	for _, l := range links {
		if masters[l.Attrs().Index] {
			_ = netlink.LinkDel(l)
		}
	}
}

// cgroupDirs lists every directory of runDir's kurmad cgroup subtree in
// every hierarchy, parents first.
func cgroupDirs(runDir string) []string {
	parent := testutil.CgroupParent(runDir)
	var out []string
	for _, h := range testutil.CgroupHierarchies() {
		root := filepath.Join(h, parent)
		_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// removeCgroups kills whatever still runs in runDir's cgroup subtree and
// removes its directories (deepest first).
func removeCgroups(runDir string) error {
	dirs := cgroupDirs(runDir)
	for _, d := range dirs {
		data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for range 20 {
			if err = os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
