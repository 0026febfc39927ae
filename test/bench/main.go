// Command bench is `make bench`: kurmad measured against the CNI floor
// (libcni calling the same plugin binaries directly), throughput at 1, 4
// and 16 clients, boot-to-ready, docker:// pulls against skopeo, a soak
// that counts what it leaks, and the exec-agent overhead. It prints one
// table per section and never fails on a number; it exits non-zero only
// when it could not measure.
//
// It needs root and uses only the bridges kt-bench0..2 and 10.206.0.0/16,
// state and run dirs under a temp dir, and removes everything it made at
// the end, also on error or SIGINT/SIGTERM.
//
//	go run -tags containers_image_openpgp ./test/bench [-n 200] [-soak 1000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// The bench's kernel objects (see notes/contracts.md): 10.206.0.0/16 split
// into /18s, one bridge each.
var benchNets = []netSpec{
	{Name: "bench0", Bridge: "kt-bench0", Subnet: "10.206.0.0/18"},
	{Name: "bench1", Bridge: "kt-bench1", Subnet: "10.206.64.0/18"},
	{Name: "bench2", Bridge: "kt-bench2", Subnet: "10.206.128.0/18"},
}

func bridgesOf(nets []netSpec) []string {
	var out []string
	for _, n := range nets {
		out = append(out, n.Bridge)
	}
	return out
}

type options struct {
	repo, bin, images string
	n, warmup, soak   int
	tput              int
	boots, pulls      int
	goBenchN          int
	profile, trace    string
	keep              bool
}

// cleanups run in reverse order at the end, whatever happened.
type cleanups struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanups) add(f func()) { c.mu.Lock(); c.fns = append(c.fns, f); c.mu.Unlock() }
func (c *cleanups) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func main() {
	var o options
	wd, _ := os.Getwd()
	flag.StringVar(&o.repo, "repo", wd, "repository root")
	flag.StringVar(&o.bin, "bin", "", "dir with kurmad and kurma-agent (default <repo>/bin)")
	flag.StringVar(&o.images, "images", "", "dir `make images` wrote (default <repo>/images/out)")
	flag.IntVar(&o.n, "n", 200, "timed attach/detach iterations (after warm-up)")
	flag.IntVar(&o.warmup, "warmup", 20, "warm-up iterations")
	flag.IntVar(&o.tput, "tput", 200, "pods per throughput level")
	flag.IntVar(&o.soak, "soak", 1000, "pods created and deleted by the soak (concurrency 16)")
	flag.IntVar(&o.boots, "boots", 5, "warm boots timed for boot-to-ready")
	flag.IntVar(&o.pulls, "pulls", 3, "cold pulls per tool")
	flag.IntVar(&o.goBenchN, "gobench", 200, "iterations of the networkpod exec benchmarks (0: skip)")
	flag.StringVar(&o.profile, "profile", "", "write a 10s CPU profile of kurmad under create/delete load to this file")
	flag.StringVar(&o.trace, "trace", "", "write a 5s execution trace of kurmad under sequential create/delete to this file (go tool trace -pprof=syscall|sync|net FILE)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (logs) instead of removing it")
	flag.Parse()
	if o.bin == "" {
		o.bin = filepath.Join(o.repo, "bin")
	}
	if o.images == "" {
		o.images = filepath.Join(o.repo, "images", "out")
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(o options) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, bridges, containers)")
	}
	for _, p := range []string{filepath.Join(o.bin, "kurmad"), filepath.Join(o.bin, "kurma-agent"),
		filepath.Join(o.images, "cni-netplugin.aci"), filepath.Join(o.images, "bin", "bridge")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing: run `make build images` first: %w", p, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var cl cleanups
	defer cl.run()
	dir, err := os.MkdirTemp("", "kbench-")
	if err != nil {
		return err
	}
	allBridges := bridgesOf(benchNets)
	testutil.DeleteBridges(allBridges) // a previous run that was SIGKILLed
	cl.add(func() {
		testutil.UnmountUnder(dir)
		testutil.DeleteBridges(allBridges)
		if o.keep {
			progress("kept %s", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			progress("cleanup: %v", err)
		}
	})
	aci := filepath.Join(o.images, "cni-netplugin.aci")

	fmt.Printf("kurma bench  %s  cores (runtime.NumCPU)=%d  GOMAXPROCS=%d  load=%s  %s\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAvg(), kernel())
	fmt.Printf("iterations n=%d (warm-up %d), throughput %d pods/level, soak %d pods at 16 clients\n",
		o.n, o.warmup, o.tput, o.soak)

	var tables []*table
	show := func(t *table) {
		tables = append(tables, t)
		t.print(os.Stdout)
	}

	// 1. The floor.
	progress("floor: libcni on %s", benchNets[0].Bridge)
	fl, err := newFloor(filepath.Join(o.images, "bin"), aci, filepath.Join(dir, "floor"), benchNets[0])
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	var fNetns, fAdd, fDel, fRm, fNetnsAdd, fDelRm dist
	var floorCPU0 time.Duration
	for i := 0; i < o.warmup+o.n; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if i == o.warmup {
			floorCPU0 = selfAndChildrenCPU()
		}
		s, err := fl.once(ctx, i)
		if err != nil {
			return fmt.Errorf("floor iteration %d: %w", i, err)
		}
		if i < o.warmup {
			continue
		}
		fNetns = append(fNetns, s.netns)
		fAdd = append(fAdd, s.add)
		fDel = append(fDel, s.del)
		fRm = append(fRm, s.rmNetns)
		fNetnsAdd = append(fNetnsAdd, s.netns+s.add)
		fDelRm = append(fDelRm, s.del+s.rmNetns)
	}
	floorCPU := (selfAndChildrenCPU() - floorCPU0) / time.Duration(max(o.n, 1))

	// The same through the image's cni-wrapper run on the host: what the
	// wrapper process adds, without the container and the exec agent.
	var wAdd, wDel dist
	var wrapCPU0 time.Duration
	wrapper := filepath.Join(o.images, "bin", "cni-wrapper")
	for i := 0; i < o.warmup/2+o.n/2; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if i == o.warmup/2 {
			wrapCPU0 = selfAndChildrenCPU()
		}
		a, dl, err := fl.wrapperOnce(ctx, wrapper, filepath.Join(o.images, "bin"), i)
		if err != nil {
			return fmt.Errorf("cni-wrapper on the host, iteration %d: %w", i, err)
		}
		if i >= o.warmup/2 {
			wAdd, wDel = append(wAdd, a), append(wDel, dl)
		}
	}

	wrapCPU := (selfAndChildrenCPU() - wrapCPU0) / time.Duration(max(o.n/2, 1))

	// 2. kurmad, one network.
	progress("kurmad: boot with network %s", benchNets[0].Name)
	d, err := newDaemon(filepath.Join(o.bin, "kurmad"), filepath.Join(dir, "d1"), aci, benchNets[:1])
	if err != nil {
		return err
	}
	d.LogLevel = "debug" // the breakdown below reads its JSON log
	cl.add(func() { shutdown(d) })
	if err := d.Start(); err != nil {
		return err
	}
	if _, err := d.waitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	bootRSS, bootThreads, _ := procStatus(d.Pid())
	base := takeBaseline(ctx, d)
	net0 := benchNets[0].Name

	progress("kurmad: warm-up %d, then %d sequential create/delete", o.warmup, o.n)
	if r := cycles(ctx, d, net0, o.warmup, 1); r.failures > 0 {
		return fmt.Errorf("warm-up: %d failures: %s", r.failures, strings.Join(r.firstErrs, "; "))
	}
	logFrom := logOffset(d.LogPath)
	own0, cont0, cpuErr := daemonCPU(d)
	lat := cycles(ctx, d, net0, o.n, 1)
	own1, cont1, cpuErr1 := daemonCPU(d)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	t := &table{title: "attach/detach: one bridge+host-local network (ms)"}
	t.add(distRow("floor netns create+lo up", fNetns))
	t.add(distRow("floor add (libcni AddNetworkList)", fAdd))
	t.add(distRow("floor netns+add", fNetnsAdd))
	t.add(distRow("floor del (libcni DelNetworkList)", fDel))
	t.add(distRow("floor netns remove", fRm))
	t.add(distRow("floor del+netns remove", fDelRm))
	t.add(vsFloor(distRow("kurmad POST /v1/pods vs netns+add", lat.creates), lat.creates, fNetnsAdd, "netns+add", 1.25))
	t.add(vsFloor(distRow("kurmad POST /v1/pods vs add", lat.creates), lat.creates, fAdd, "add", 1.25))
	t.add(vsFloor(distRow("kurmad DELETE vs del+netns rm", lat.deletes), lat.deletes, fDelRm, "del+rm", 1.25))
	t.add(vsFloor(distRow("kurmad DELETE vs del", lat.deletes), lat.deletes, fDel, "del", 1.25))
	t.note("ratio is p50/p99 against the anchor's p50/p99; kurmad's POST includes its netns create + lo up + journal writes, its DELETE the netns removal, so the netns rows are the like-for-like anchors")
	if lat.failures > 0 {
		t.note("%d failed cycles: %s", lat.failures, strings.Join(lat.firstErrs, "; "))
	}
	show(t)

	if bd, err := readBreakdown(d.LogPath, logFrom); err != nil {
		progress("breakdown: %v", err)
	} else {
		t = &table{title: "where kurmad's attach/detach time goes (sequential run above; kurmad's own log durations)"}
		t.add(vsFloor(distRow("client POST /v1/pods", lat.creates), lat.creates, fNetnsAdd, "netns+add", 1.25))
		t.add(distRow("  podnet Create (\"pod created\")", bd.created))
		t.add(vsFloor(distRow("    add call (\"network attached\")", bd.attached), bd.attached, fAdd, "floor add", 1.25))
		t.add(vsFloor(distRow("client DELETE", lat.deletes), lat.deletes, fDelRm, "del+rm", 1.25))
		t.add(distRow("  podnet Delete (\"pod deleted\")", bd.deleted))
		t.add(vsFloor(distRow("    del call (\"network detached\")", bd.detached), bd.detached, fDel, "floor del", 1.25))
		t.add(distRow("exec agent round trips (add and del)", bd.agentCalls))
		t.add(vsFloor(distRow("host cni-wrapper add (no container)", wAdd), wAdd, fAdd, "floor add", 1.25))
		t.add(vsFloor(distRow("host cni-wrapper del (no container)", wDel), wDel, fDel, "floor del", 1.25))
		t.note("client − podnet = HTTP + JSON; podnet − call = netns, journal (bbolt), resolv.conf; call − floor = exec agent + cni-wrapper process + container; the host cni-wrapper rows (half as many iterations) split that: wrapper process vs container+agent")
		show(t)
	}

	t = &table{title: "CPU per create+delete cycle (ms of CPU; barely moved by the load average, unlike the wall times above)"}
	t.add(row{metric: fmt.Sprintf("floor: netns+add+del+rm, bench process + plugins (n=%d)", o.n), p50: ms(floorCPU)})
	t.add(row{metric: fmt.Sprintf("host cni-wrapper add+del + plugins (n=%d)", o.n/2), p50: ms(wrapCPU),
		anchor: "floor " + ms(floorCPU), ratio: fmt.Sprintf("%.2f×", ratio(wrapCPU, floorCPU))})
	if err := errors.Join(cpuErr, cpuErr1); err != nil {
		t.note("kurmad CPU: %v", err)
	} else {
		n := time.Duration(max(len(lat.deletes), 1))
		own, cont := (own1-own0)/n, (cont1-cont0)/n
		t.add(row{metric: "kurmad process (HTTP, podnet, journal, netns)", p50: ms(own)})
		t.add(row{metric: "plugin container (agent, cni-wrapper, plugins)", p50: ms(cont)})
		t.add(row{metric: "kurmad total", p50: ms(own + cont), anchor: "floor " + ms(floorCPU),
			ratio: fmt.Sprintf("%.2f×", ratio(own+cont, floorCPU)), tgt: "≤1.25× (proxy)", met: yesNo(ratio(own+cont, floorCPU) <= 1.25)})
		t.note("kurmad's process CPU has a 10ms granularity (/proc/<pid>/stat), averaged over the %d cycles; the container's comes from its cgroup's cpuacct", len(lat.deletes))
	}
	show(t)

	// 3. Throughput.
	t = &table{title: fmt.Sprintf("throughput: %d create+delete cycles per level (pods/s in p50 column)", o.tput)}
	var one, floorOne float64
	for _, conc := range []int{1, 4, 16} {
		progress("throughput: floor at %d clients", conc)
		fr, err := floorCycles(ctx, fl, o.tput, conc, 100000*conc)
		if err != nil {
			return fmt.Errorf("floor throughput: %w", err)
		}
		fpps := fr.podsPerSec()
		frw := row{metric: fmt.Sprintf("floor %d client(s): netns+add+del+rm/s", conc), p50: fmt.Sprintf("%.1f", fpps)}
		if conc == 1 {
			floorOne = fpps
		} else if floorOne > 0 {
			frw.anchor, frw.ratio = fmt.Sprintf("floor 1 client %.1f/s", floorOne), fmt.Sprintf("%.2f×", fpps/floorOne)
		}
		t.add(frw)

		progress("throughput: kurmad at %d clients", conc)
		r := cycles(ctx, d, net0, o.tput, conc)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pps := r.podsPerSec()
		rw := row{metric: fmt.Sprintf("kurmad %d client(s): pods/s", conc), p50: fmt.Sprintf("%.1f", pps)}
		if conc == 1 {
			one = pps
		} else if one > 0 {
			rw.anchor = fmt.Sprintf("kurmad 1 client %.1f/s", one)
			rw.ratio = fmt.Sprintf("%.2f×", pps/one)
			if conc == 16 {
				rw.tgt, rw.met = "≥1.6×", yesNo(pps/one >= 1.6)
			}
		}
		t.add(rw)
		t.add(row{metric: fmt.Sprintf("  kurmad/floor at %d client(s)", conc), p50: fmt.Sprintf("%.2f×", pps/fpps)})
		t.add(distRow(fmt.Sprintf("  %d client(s): create latency", conc), r.creates))
		t.add(distRow(fmt.Sprintf("  %d client(s): delete latency", conc), r.deletes))
		if r.failures > 0 {
			t.note("%d clients: %d failed cycles: %s", conc, r.failures, strings.Join(r.firstErrs, "; "))
		}
	}
	t.note("the floor rows run the same plugins through libcni with the same concurrency: on %d cores they bound what any host can scale to", runtime.NumCPU())
	show(t)

	if o.profile != "" {
		progress("profile: 10s of kurmad CPU under 4 clients → %s", o.profile)
		pctx, pcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.cpuProfile(ctx, 10*time.Second, o.profile); pcancel() }()
		for pctx.Err() == nil {
			cycles(pctx, d, net0, 40, 4)
		}
		if err := <-done; err != nil {
			progress("profile: %v", err)
		}
	}

	if o.trace != "" {
		progress("trace: 5s of kurmad under 1 client → %s", o.trace)
		tctx, tcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			body, err := d.pprofGet(ctx, "/debug/pprof/trace?seconds=5")
			if err == nil {
				err = os.WriteFile(o.trace, body, 0o600)
			}
			done <- err
			tcancel()
		}()
		traced := 0
		for tctx.Err() == nil {
			traced += len(cycles(tctx, d, net0, 5, 1).deletes)
		}
		if err := <-done; err != nil {
			progress("trace: %v", err)
		} else {
			progress("trace: %d complete create+delete cycles in the 5s (divide the trace's totals by it)", traced)
		}
	}

	// 4. Soak.
	progress("soak: %d pods at 16 clients", o.soak)
	rssBefore, thrBefore, _ := procStatus(d.Pid())
	gBefore, connsBefore, _ := d.goroutines(ctx)
	soak := cycles(ctx, d, net0, o.soak, 16)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	lk := countLeaks(ctx, d, base, bridgesOf(benchNets[:1]))
	t = &table{title: fmt.Sprintf("soak: %d pods created and deleted at 16 clients (%.1f pods/s, %d failed)", o.soak, soak.podsPerSec(), soak.failures)}
	count := func(metric string, n int) {
		r := row{metric: metric, p50: fmt.Sprint(n), tgt: "0", met: yesNo(n == 0)}
		if n < 0 {
			r.p50, r.met = "unknown", "?"
		}
		t.add(r)
	}
	count("leaked veths on kt-bench0", lk.Veths)
	count("leaked netns files", lk.NetnsFiles)
	count("leaked pod dirs", lk.PodDirs)
	count("leaked mounts (vs after boot)", lk.Mounts)
	count("leaked host-local IP files", lk.IPFiles)
	count("journal entries (GET /v1/pods)", lk.Journal)
	count("leaked cgroup dirs (vs after boot)", lk.Cgroups)
	if lk.Goroutines == -1 {
		count("goroutine growth (vs after boot)", -1)
	} else {
		count("goroutine growth (vs after boot)", max(lk.Goroutines, 0))
	}
	t.add(row{metric: "kurmad goroutines w/o HTTP conns: boot / before soak / after", p50: fmt.Sprintf("%d / %d / %d", base.goroutines, gBefore-connsBefore, base.goroutines+lk.Goroutines)})
	t.add(row{metric: "kurmad goroutines all (idle HTTP conns) after soak", p50: fmt.Sprintf("%d (%d)", lk.GoTotal, lk.HTTPConns)})
	t.add(row{metric: "kurmad threads boot / before soak / after", p50: fmt.Sprintf("%d / %d / %d", bootThreads, thrBefore, int(base.threads)+lk.Threads)})
	t.add(row{metric: "kurmad RSS boot / before soak / after", p50: fmt.Sprintf("%.1f / %.1f / %.1f MiB", mib(bootRSS), mib(rssBefore), mib(lk.RSSKiB)),
		anchor: "before soak", ratio: fmt.Sprintf("%+.1f MiB", mib(lk.RSSKiB-rssBefore))})
	for _, s := range lk.Details {
		t.note("%s", s)
	}
	if soak.failures > 0 {
		t.note("%d failed cycles: %s", soak.failures, strings.Join(soak.firstErrs, "; "))
	}

	progress("stopping kurmad")
	if err := d.RemoveAllPods(ctx); err != nil {
		t.note("removing pods: %v", err)
	}
	stopErr := d.Stop(45 * time.Second)
	if stopErr != nil {
		t.note("%v", stopErr)
	}
	count("mounts under its dirs after stop", len(d.Mounts()))
	count("cgroup dirs after stop", len(d.CgroupDirs()))
	show(t)

	// 5. Boot-to-ready with three networks and a warm image cache.
	progress("boot: 3 networks, 1 cold + %d warm boots", o.boots)
	t = &table{title: "boot-to-ready: 3 networks, warm image cache (process start → all running)"}
	d3, err := newDaemon(filepath.Join(o.bin, "kurmad"), filepath.Join(dir, "d3"), aci, benchNets)
	if err != nil {
		return err
	}
	cl.add(func() { shutdown(d3) })
	var cold time.Duration
	var warm dist
	for i := 0; i <= o.boots; i++ {
		if err := d3.Start(); err != nil {
			return err
		}
		took, err := d3.waitReady(ctx, 2*time.Minute)
		if err != nil {
			return fmt.Errorf("boot %d: %w", i, err)
		}
		if i == 0 {
			cold = took
		} else {
			warm = append(warm, took)
		}
		if err := d3.Stop(45 * time.Second); err != nil {
			t.note("boot %d: %v", i, err)
		}
	}
	t.add(row{metric: "cold boot (image fetched from file://)", p50: ms(cold)})
	t.add(distRow("warm boot", warm))
	show(t)

	// 6. docker:// pull: kurma's fetcher vs skopeo.
	progress("pull: local registry, %d cold pulls each", o.pulls)
	t = &table{title: "docker:// pull of cni-netplugin from a local registry (fresh store each pull)"}
	if err := benchPull(ctx, o, dir, t); err != nil {
		t.note("pull section failed: %v", err)
	}
	show(t)

	// 7. Exec agent overhead (pkg/networkpod benchmarks).
	if o.goBenchN > 0 {
		progress("go test -bench Exec ./pkg/networkpod/ (%dx)", o.goBenchN)
		t = &table{title: fmt.Sprintf("networkpod exec of a no-op static binary (go test -bench Exec -benchtime %dx; mean per op in p50 column)", o.goBenchN)}
		res, out, err := runGoBench(ctx, o.repo, o.goBenchN)
		if err != nil {
			t.note("%v\n%s", err, tailLines(out, 15))
		}
		var direct time.Duration
		for _, b := range res {
			if b.name == "BenchmarkDirectExec" {
				direct = b.perOp
			}
		}
		for _, b := range res {
			r := row{metric: fmt.Sprintf("%s (n=%d)", b.name, b.n), p50: ms(b.perOp)}
			if direct > 0 && b.name != "BenchmarkDirectExec" {
				r.anchor = "DirectExec " + ms(direct)
				r.ratio = fmt.Sprintf("%.2f×", ratio(b.perOp, direct))
				if b.name == "BenchmarkExecParallel" {
					r.ratio += " (parallel: ns/op is wall/ops)"
				}
			}
			t.add(r)
		}
		show(t)
	}

	fmt.Printf("\nload at the end: %s\n", loadAvg())
	return nil
}

func benchPull(ctx context.Context, o options, dir string, t *table) error {
	reg, err := startRegistry(ctx, filepath.Join(o.images, "cni-netplugin"), "v1")
	if err != nil {
		return err
	}
	defer reg.close()
	var kurma dist
	for i := 0; i < o.pulls; i++ {
		d, err := pullKurma(ctx, reg, filepath.Join(dir, "pull", fmt.Sprintf("kurma-%d", i)))
		if err != nil {
			return fmt.Errorf("kurma pull: %w", err)
		}
		kurma = append(kurma, d)
	}
	skopeo, lookErr := exec.LookPath("skopeo")
	var sk dist
	if lookErr == nil {
		for i := 0; i < o.pulls; i++ {
			d, err := pullSkopeo(ctx, skopeo, reg, filepath.Join(dir, "pull", fmt.Sprintf("skopeo-%d", i)))
			if err != nil {
				t.note("skopeo: %v", err)
				sk = nil
				break
			}
			sk = append(sk, d)
		}
	}
	kr := row{metric: fmt.Sprintf("kurma imagefetch docker:// (pull+verify+unpack, n=%d)", len(kurma)), p50: ms(kurma.median())}
	if len(sk) > 0 {
		kr.anchor = "skopeo " + ms(sk.median())
		kr.ratio = fmt.Sprintf("%.2f×", ratio(kurma.median(), sk.median()))
	}
	t.add(kr)
	if len(sk) > 0 {
		t.add(row{metric: fmt.Sprintf("skopeo copy → oci: layout (no unpack, n=%d)", len(sk)), p50: ms(sk.median())})
	} else {
		t.add(row{metric: "skopeo copy", p50: "skipped"})
		if lookErr != nil {
			t.note("skopeo is not installed (scripts/need-packages skopeo=skopeo could not install it)")
		}
	}
	t.note("p50 is the median of the cold pulls; kurma's fetch also unpacks the layer into a rootfs, skopeo only stores blobs")
	return nil
}

// shutdown deletes d's pods, stops it and removes what a killed daemon
// would leave (its cgroups, mounts under its dir).
func shutdown(d *daemon) {
	if d.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := d.RemoveAllPods(ctx); err != nil {
			progress("cleanup: %v", err)
		}
		cancel()
	}
	if err := d.Cleanup(45 * time.Second); err != nil {
		progress("cleanup: %v", err)
	}
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return ""
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return "linux " + b.String()
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
