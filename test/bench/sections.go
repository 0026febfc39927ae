package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// The goals (issue 27 for attach, detach and kurmactl; issue 13 for the
// rest), medians, side by side in one run.
const (
	attachGoal = 1.05 // attach and detach p50 (and p99) vs the floor
	cpuGoal    = 1.08 // kurmad's CPU per create+delete vs the floor's
	tputGoal   = 0.95 // kurmad's pods/s vs the floor's at 1, 4 and 16 clients
	wholeGoal  = 1.10 // kurmactl pod create+rm vs ip netns + cnitool
	pullGoal   = 1.30 // docker:// fetch+verify+unpack vs skopeo copy + tar
	// warmBootGoal is the first boot: nothing running, images present
	// (issue 39).
	warmBootGoal = 800 * time.Millisecond
	coldBootGoal = time.Second
	// adoptBootGoal is a boot whose containers a kurmad before it left
	// running (issue 39).
	adoptBootGoal = 150 * time.Millisecond
	// startCPUGoal is the CPU a plugin container's start may cost
	// (issue 39), kurmad's share of the boot included.
	startCPUGoal = 40 * time.Millisecond
	listGoal     = 5 * time.Millisecond // GET /v1/pods with listPods pods (issue 27)
	ownShareGoal = time.Millisecond     // kurmad's own share of a create (issue 39; issue 27 asked 0.5 ms)
)

// bench is one run of `make bench`: its options, its temp dir and what
// every section leaves for cleanup. Each section prints its table(s).
type bench struct {
	o   options
	ctx context.Context
	dir string // the run's temp dir
	aci string // images/out/cni-netplugin.aci
	cl  cleanups
	// floorNext is the next sequential floor cycle's index (its netns
	// name and container id).
	floorNext int
}

// makeDir makes the run's temp dir; its cleanup unmounts and removes it
// and the bench's bridges (also those of an earlier run that was killed).
func (b *bench) makeDir() error {
	dir, err := os.MkdirTemp("", "kbench-")
	if err != nil {
		return err
	}
	b.dir = dir
	allBridges := bridgesOf(benchNets)
	testutil.DeleteBridges(allBridges) // a previous run that was SIGKILLed
	b.cl.add(func() {
		testutil.UnmountUnder(dir)
		testutil.DeleteBridges(allBridges)
		if b.o.keep {
			progress("kept %s", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			progress("cleanup: %v", err)
		}
	})
	return nil
}

// floorResult is the floor: libcni directly (timed in attachDetach,
// interleaved with kurmad), and the image's cni-wrapper run on the host
// (timed in measureFloor).
type floorResult struct {
	fl                                   *floor
	netns, add, del, rm, netnsAdd, delRm dist
	cpu                                  time.Duration // per create+delete cycle
	wAdd, wDel                           dist          // host cni-wrapper
	wrapCPU                              time.Duration
}

// measureFloor is section 1: the floor's libcni, and the plugins through
// the host cni-wrapper. The floor's own rows are timed later, interleaved
// with kurmad's (attachDetach). It prints nothing; later tables quote it.
func (b *bench) measureFloor() (*floorResult, error) {
	progress("floor: libcni on %s, host cni-wrapper", benchNets[0].Bridge)
	fl, err := newFloor(filepath.Join(b.o.images, "bin"), b.aci, filepath.Join(b.dir, "floor"), benchNets[0])
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	r := &floorResult{fl: fl}
	return r, b.hostWrapper(r)
}

// hostWrapper runs the image's cni-wrapper on the host: what the wrapper
// process adds, without the container and the exec agent.
func (b *bench) hostWrapper(r *floorResult) error {
	o, ctx := b.o, b.ctx
	var cpu0 time.Duration
	wrapper := filepath.Join(o.images, "bin", "cni-wrapper")
	for i := 0; i < o.warmup/2+o.n/2; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if i == o.warmup/2 {
			cpu0 = selfAndChildrenCPU()
		}
		a, dl, err := r.fl.wrapperOnce(ctx, wrapper, filepath.Join(o.images, "bin"), i)
		if err != nil {
			return fmt.Errorf("cni-wrapper on the host, iteration %d: %w", i, err)
		}
		if i >= o.warmup/2 {
			r.wAdd, r.wDel = append(r.wAdd, a), append(r.wDel, dl)
		}
	}
	r.wrapCPU = (selfAndChildrenCPU() - cpu0) / time.Duration(max(o.n/2, 1))
	return nil
}

// bootState is what a freshly booted kurmad had, for the soak's table.
type bootState struct {
	rssKiB, threads int64
	base            baseline
}

// bootDaemon starts section 2's kurmad on one network, at -level (info,
// kurmad's default, unless asked otherwise), and takes its baseline. Every
// row with a goal times this kurmad; the breakdown has its own (debugPass).
func (b *bench) bootDaemon() (*daemon, bootState, error) {
	progress("kurmad: boot with network %s", benchNets[0].Name)
	d, err := newDaemon(filepath.Join(b.o.bin, "kurmad"), filepath.Join(b.dir, "d1"), b.aci, benchNets[:1])
	if err != nil {
		return nil, bootState{}, err
	}
	d.LogLevel = b.o.level
	b.cl.add(func() { shutdown(d) })
	if err := d.Start(); err != nil {
		return nil, bootState{}, err
	}
	if _, err := d.waitReady(b.ctx, 2*time.Minute); err != nil {
		return nil, bootState{}, err
	}
	var bs bootState
	bs.rssKiB, bs.threads, _ = procStatus(d.Pid())
	bs.base = takeBaseline(b.ctx, d)
	return d, bs, nil
}

// attachDetach is the rest of section 2: warm-up of both sides, then
// sequential create/delete of the floor and kurmad interleaved in blocks,
// where the time goes (from dbg, the debug-level pass; nil: skipped), and
// the CPU.
func (b *bench) attachDetach(d *daemon, fr *floorResult, dbg *debugRun) error {
	o, ctx := b.o, b.ctx
	progress("floor and kurmad: warm-up %d each, then %d sequential create/delete each, alternating blocks of %d", o.warmup, o.n, o.block)
	s, err := interleave(ctx, fr.fl, d, benchNets[0].Name, o.warmup, o.n, o.block, &b.floorNext)
	if err != nil {
		return err
	}
	fr.netns, fr.add, fr.del, fr.rm, fr.netnsAdd, fr.delRm = s.netns, s.add, s.del, s.rm, s.netnsAdd, s.delRm
	fr.cpu = s.floorPerCycle()
	lat := s.lat
	t := &table{title: "attach/detach: one bridge+host-local network (ms)"}
	t.add(distRow("floor netns create+lo up", fr.netns))
	t.add(distRow("floor add (libcni AddNetworkList)", fr.add))
	t.add(distRow("floor netns+add", fr.netnsAdd))
	t.add(distRow("floor del (libcni DelNetworkList)", fr.del))
	t.add(distRow("floor netns remove", fr.rm))
	t.add(distRow("floor del+netns remove", fr.delRm))
	t.add(vsFloor(distRow("kurmad POST /v1/pods vs netns+add", lat.creates), lat.creates, fr.netnsAdd, "netns+add", attachGoal))
	t.add(vsFloor(distRow("kurmad POST /v1/pods vs add", lat.creates), lat.creates, fr.add, "add", attachGoal))
	t.add(vsFloor(distRow("kurmad DELETE vs del+netns rm", lat.deletes), lat.deletes, fr.delRm, "del+rm", attachGoal))
	t.add(vsFloor(distRow("kurmad DELETE vs del", lat.deletes), lat.deletes, fr.del, "del", attachGoal))
	t.note("kurmad at --log-level %s (text), as an operator runs it; the breakdown below comes from a separate kurmad at debug", o.level)
	t.note("floor and kurmad rows interleaved in blocks of %d cycles (floor block, kurmad block, ... until n=%d each), after %d warm-up cycles each", o.block, o.n, o.warmup)
	t.note("ratio is p50/p99 against the anchor's p50/p99; kurmad's POST includes its netns create + lo up + journal writes, its DELETE the netns removal, so the netns rows are the like-for-like anchors")
	if lat.failures > 0 {
		t.note("%d failed cycles: %s", lat.failures, strings.Join(lat.firstErrs, "; "))
	}
	t.print(os.Stdout)

	if dbg != nil && dbg.bdErr != nil {
		progress("breakdown: %v", dbg.bdErr)
	} else if dbg != nil {
		progress("breakdown: the HTTP anchor, %d POSTs between two Go processes", roundTrips)
		rt, rterr := roundTrip(b.ctx, b.dir)
		bt := breakdownTable(o.level, lat, dbg, fr, rt)
		if rterr != nil {
			bt.note("HTTP + JSON's anchor: %v", rterr)
		}
		bt.print(os.Stdout)
	}
	cpuTable(o, fr, s.kurmadPerCycle(), s.cpuErr, len(lat.deletes), dbg).print(os.Stdout)
	return nil
}

// syncLog waits until what d logged so far is in its log file, which the
// breakdown reads.
func syncLog(d *daemon) {
	if err := d.SyncLog(10 * time.Second); err != nil {
		progress("breakdown: %v", err)
	}
}

// breakdownTable splits the debug-level pass's latencies by that kurmad's
// own log durations; its client rows are quoted against the timed
// kurmad's (lat, at level), which is what debug logging costs.
func breakdownTable(level string, lat cycleResult, dbg *debugRun, fr *floorResult, roundTrip dist) *table {
	t := &table{title: fmt.Sprintf("where kurmad's attach/detach time goes (separate kurmad at debug level, n=%d; its own JSON log durations)", len(dbg.lat.deletes))}
	bd, dl := dbg.bd, dbg.lat
	t.add(vsFloor(distRow("client POST /v1/pods at debug", dl.creates), dl.creates, lat.creates, "at "+level, 0))
	t.add(distRow("  podnet Create (\"pod created\")", bd.created))
	t.add(vsFloor(distRow("    add call (\"network attached\")", bd.attached), bd.attached, fr.add, "floor add", 0))
	t.add(vsFloor(distRow("client DELETE at debug", dl.deletes), dl.deletes, lat.deletes, "at "+level, 0))
	t.add(distRow("  podnet Delete (\"pod deleted\")", bd.deleted))
	t.add(vsFloor(distRow("    del call (\"network detached\")", bd.detached), bd.detached, fr.del, "floor del", 0))
	t.add(distRow("exec agent round trips (add and del)", bd.agentCalls))
	if own, ok := perCycle(dl.creates, bd.attached); ok && len(bd.created) == len(own) {
		// The cycles are sequential: the i-th request and the i-th log
		// lines are one create, so each difference is one cycle's.
		r := distRow("kurmad's own share of a create, per cycle (client − add call)", own)
		r.tgt, r.met = "≤"+ms(ownShareGoal)+" p50", yesNo(own.median() <= ownShareGoal)
		t.add(r)
		http, _ := perCycle(dl.creates, bd.created)
		pod, _ := perCycle(bd.created, bd.attached)
		hr := distRow("  HTTP + JSON, per cycle (client − podnet Create)", http)
		if len(roundTrip) > 0 {
			hr.anchor = "round trip " + ms(roundTrip.median())
			hr.ratio = fmt.Sprintf("%.2f×", ratio(http.median(), roundTrip.median()))
		}
		t.add(hr)
		t.add(distRow("  podnet around the call, per cycle (podnet Create − add call)", pod))
	} else {
		t.note("no per-cycle rows: %d requests against %d \"pod created\" and %d \"network attached\" lines", len(dl.creates), len(bd.created), len(bd.attached))
	}
	if len(roundTrip) > 0 {
		t.add(distRow(fmt.Sprintf("anchor: a POST round trip, Go client and server processes on a unix socket, %v idle between", roundTripIdle), roundTrip))
		t.note("the round trip's server is a copy of the bench that reads the body and answers 201 with a pod-sized body: what the transport and the wake-ups of two processes idle since the last request cost here, before kurmad does anything")
	}
	if own, ok := perCycle(dl.deletes, bd.detached); ok {
		t.add(distRow("kurmad's own share of a delete, per cycle (client − del call)", own))
	}
	t.add(vsFloor(distRow("host cni-wrapper add (no container)", fr.wAdd), fr.wAdd, fr.add, "floor add", attachGoal))
	t.add(vsFloor(distRow("host cni-wrapper del (no container)", fr.wDel), fr.wDel, fr.del, "floor del", attachGoal))
	t.note("every row but the host cni-wrapper's ran at debug level, which the goal rows above (at %s) do not pay; the client rows' anchor is the same request at %s, so their ratio is what debug logging costs", level, level)
	if dl.failures > 0 {
		t.note("%d failed cycles at debug: %s", dl.failures, strings.Join(dl.firstErrs, "; "))
	}
	t.note("client − podnet = HTTP + JSON; podnet − call = netns, journal, resolv.conf; call − floor = exec agent + cni-wrapper process + container; the host cni-wrapper rows (half as many iterations) split that: wrapper process vs container+agent")
	return t
}

// perCycle is a[i] − b[i] for each cycle, when a and b time the same
// cycles (as many of each).
func perCycle(a, b dist) (dist, bool) {
	if len(a) == 0 || len(a) != len(b) {
		return nil, false
	}
	d := make(dist, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d, true
}

// cpuTable is the CPU per create+delete cycle: the floor's, the host
// wrapper's, and kurmad's (its own and its containers') unless cpuErr.
func cpuTable(o options, fr *floorResult, kurmad [2]time.Duration, cpuErr error, cycles int, dbg *debugRun) *table {
	t := &table{title: "CPU per create+delete cycle (ms of CPU; barely moved by the load average, unlike the wall times above)"}
	t.add(row{metric: fmt.Sprintf("floor: netns+add+del+rm, bench process + plugins (n=%d)", o.n), p50: ms(fr.cpu)})
	t.add(row{metric: fmt.Sprintf("host cni-wrapper add+del + plugins (n=%d)", o.n/2), p50: ms(fr.wrapCPU),
		anchor: "floor " + ms(fr.cpu), ratio: fmt.Sprintf("%.2f×", ratio(fr.wrapCPU, fr.cpu))})
	if cpuErr != nil {
		t.note("kurmad CPU: %v", cpuErr)
		return t
	}
	own, cont := kurmad[0], kurmad[1]
	t.add(row{metric: fmt.Sprintf("kurmad process (HTTP, podnet, journal, netns) at %s", o.level), p50: ms(own)})
	t.add(row{metric: "plugin container (agent, cni-wrapper, plugins)", p50: ms(cont)})
	t.add(row{metric: "kurmad total", p50: ms(own + cont), anchor: "floor " + ms(fr.cpu),
		ratio: fmt.Sprintf("%.2f×", ratio(own+cont, fr.cpu)), tgt: fmt.Sprintf("≤%.2f×", cpuGoal), met: yesNo(ratio(own+cont, fr.cpu) <= cpuGoal)})
	if dbg != nil && dbg.cpuErr == nil {
		t.add(row{metric: fmt.Sprintf("kurmad process at debug (the breakdown's kurmad, n=%d; no goal)", len(dbg.lat.deletes)), p50: ms(dbg.own),
			anchor: fmt.Sprintf("at %s %s", o.level, ms(own)), ratio: fmt.Sprintf("%+.2fms", float64(dbg.own-own)/float64(time.Millisecond))})
	}
	t.note("kurmad ran at --log-level %s except where a row says debug", o.level)
	t.note("floor and kurmad rows interleaved in blocks of %d cycles: the floor's CPU is the bench process's own + reaped children's around floor blocks only, kurmad's its process's and its containers' around kurmad blocks only; the host cni-wrapper row ran on its own, before", o.block)
	t.note("kurmad's process CPU has a 10ms granularity (/proc/<pid>/stat), summed over its %d blocks and averaged over the %d cycles; the container's comes from its cgroup's cpuacct", (cycles+o.block-1)/max(o.block, 1), cycles)
	t.note("kurmad's periodic loops run in its blocks as in the floor's: a plugin status probe every 30s (one call into the container) may land in a kurmad block and count there; gc every 10 min does not come round")
	return t
}

// throughput is section 3: the floor and kurmad at 1, 4 and 16 clients,
// each level in alternating halves (floor, kurmad, floor, kurmad).
func (b *bench) throughput(d *daemon, fl *floor) error {
	o := b.o
	t := &table{title: fmt.Sprintf("throughput: %d create+delete cycles per level (pods/s in p50 column)", o.tput)}
	var one, floorOne float64
	for _, conc := range []int{1, 4, 16} {
		progress("throughput: floor and kurmad at %d clients, alternating in %d rounds", conc, tputRounds)
		fr, r, err := b.level(d, fl, conc)
		if err != nil {
			return err
		}
		fpps := fr.podsPerSec()
		frw := row{metric: fmt.Sprintf("floor %d client(s): netns+add+del+rm/s", conc), p50: fmt.Sprintf("%.1f", fpps)}
		if conc == 1 {
			floorOne = fpps
		} else if floorOne > 0 {
			frw.anchor, frw.ratio = fmt.Sprintf("floor 1 client %.1f/s", floorOne), fmt.Sprintf("%.2f×", fpps/floorOne)
		}
		t.add(frw)
		pps := r.podsPerSec()
		if conc == 1 {
			one = pps
		}
		kurmadRows(t, conc, r, pps, one, fpps)
	}
	t.note("kurmad at --log-level %s, as in the attach/detach rows", o.level)
	t.note("each level interleaved in %d rounds: about %d floor cycles, then as many kurmad cycles, per round; pods/s is cycles over the summed time of a side's blocks", tputRounds, o.tput/tputRounds)
	t.note("the floor rows run the same plugins through libcni with the same concurrency: on %d cores they bound what any host can scale to", runtime.NumCPU())
	t.print(os.Stdout)
	return nil
}

// tputRounds is how many blocks each side's cycles of a throughput level
// are cut into, the two sides alternating block by block.
const tputRounds = 4

// level runs one throughput level: o.tput cycles of the floor and of
// kurmad at conc clients, in tputRounds alternating blocks each.
func (b *bench) level(d *daemon, fl *floor, conc int) (floorRes, kurmadRes cycleResult, err error) {
	ctx := b.ctx
	for round := range tputRounds {
		k := b.o.tput*(round+1)/tputRounds - b.o.tput*round/tputRounds
		if k == 0 {
			continue
		}
		f, err := floorCycles(ctx, fl, k, conc, 100000*conc+20000*round)
		if err != nil {
			return floorRes, kurmadRes, fmt.Errorf("floor throughput: %w", err)
		}
		floorRes = mergeCycles(floorRes, f)
		kurmadRes = mergeCycles(kurmadRes, cycles(ctx, d, benchNets[0].Name, k, conc))
		if ctx.Err() != nil {
			return floorRes, kurmadRes, ctx.Err()
		}
	}
	return floorRes, kurmadRes, nil
}

// kurmadRows adds kurmad's rows of one throughput level: pods/s (against
// one client's), against the floor, and the latencies.
func kurmadRows(t *table, conc int, r cycleResult, pps, one, fpps float64) {
	rw := row{metric: fmt.Sprintf("kurmad %d client(s): pods/s", conc), p50: fmt.Sprintf("%.1f", pps)}
	if conc != 1 && one > 0 {
		rw.anchor = fmt.Sprintf("kurmad 1 client %.1f/s", one)
		rw.ratio = fmt.Sprintf("%.2f×", pps/one)
		if conc == 16 {
			rw.tgt, rw.met = "≥1.6×", yesNo(pps/one >= 1.6)
		}
	}
	t.add(rw)
	t.add(row{metric: fmt.Sprintf("  kurmad/floor at %d client(s)", conc), p50: fmt.Sprintf("%.2f×", pps/fpps),
		anchor: fmt.Sprintf("floor %.1f/s", fpps), tgt: fmt.Sprintf("≥%.2f×", tputGoal), met: yesNo(pps/fpps >= tputGoal)})
	t.add(distRow(fmt.Sprintf("  %d client(s): create latency", conc), r.creates))
	t.add(distRow(fmt.Sprintf("  %d client(s): delete latency", conc), r.deletes))
	if r.failures > 0 {
		t.note("%d clients: %d failed cycles: %s", conc, r.failures, strings.Join(r.firstErrs, "; "))
	}
}

// profile records -profile: 10s of kurmad's CPU under -profile-clients.
func (b *bench) profile(d *daemon) {
	if b.o.profile == "" {
		return
	}
	progress("profile: 10s of kurmad CPU under %d clients → %s", b.o.profileClients, b.o.profile)
	_, err := underLoad(b.ctx, d, b.o.profileClients, 10*b.o.profileClients, func(ctx context.Context) error {
		return d.cpuProfile(ctx, 10*time.Second, b.o.profile)
	})
	if err != nil {
		progress("profile: %v", err)
	}
}

// trace records -trace: 5s of kurmad's execution under 1 client.
func (b *bench) trace(d *daemon) {
	if b.o.trace == "" {
		return
	}
	progress("trace: 5s of kurmad under 1 client → %s", b.o.trace)
	traced, err := underLoad(b.ctx, d, 1, 5, func(ctx context.Context) error {
		body, err := d.pprofGet(ctx, "/debug/pprof/trace?seconds=5")
		if err == nil {
			err = os.WriteFile(b.o.trace, body, 0o600)
		}
		return err
	})
	if err != nil {
		progress("trace: %v", err)
	} else {
		progress("trace: %d complete create+delete cycles in the 5s (divide the trace's totals by it)", traced)
	}
}

// underLoad runs record (a profile or trace of kurmad) while clients
// create and delete pods, batch cycles at a time, until record returns;
// it returns how many cycles completed meanwhile, and record's error.
func underLoad(ctx context.Context, d *daemon, clients, batch int, record func(context.Context) error) (int, error) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- record(ctx); cancel() }()
	completed := 0
	for lctx.Err() == nil {
		completed += len(cycles(lctx, d, benchNets[0].Name, batch, clients).deletes)
	}
	err := <-done
	return completed, errors.Join(err, settle(ctx, d))
}

// settle waits, after a cancelled load, until kurmad holds no pod: a create
// whose client gave up may still finish (its pod is deleted here) or roll
// back (and holds its name until it has); the next section (the soak,
// which counts leaks and reuses the names) must start from none.
func settle(ctx context.Context, d *daemon) error {
	c := api.NewClient(d.Socket)
	return testutil.Poll(ctx, time.Minute, "kurmad to hold no pod after the cancelled load", func() error {
		pods, err := c.ListPods(ctx)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if err := c.DeletePod(ctx, p.ID); err != nil {
				return err
			}
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if len(pods) > 0 || info.Pods > 0 {
			return fmt.Errorf("%d pods listed, %d in the journal", len(pods), info.Pods)
		}
		return nil
	})
}

// soak is section 4: o.soak pods at 16 clients, then what they left, then
// kurmad stopped and what it left.
func (b *bench) soak(d *daemon, boot bootState) error {
	o, ctx := b.o, b.ctx
	progress("soak: %d pods at 16 clients", o.soak)
	rssBefore, thrBefore, _ := procStatus(d.Pid())
	gBefore, connsBefore, _ := d.goroutines(ctx)
	soak := cycles(ctx, d, benchNets[0].Name, o.soak, 16)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	lk := countLeaks(ctx, d, boot.base, bridgesOf(benchNets[:1]))
	t := &table{title: fmt.Sprintf("soak: %d pods created and deleted at 16 clients (%.1f pods/s, %d failed)", o.soak, soak.podsPerSec(), soak.failures)}
	leakRows(t, lk)
	base := boot.base
	t.add(row{metric: "kurmad goroutines w/o HTTP conns: boot / before soak / after", p50: fmt.Sprintf("%d / %d / %d", base.goroutines, gBefore-connsBefore, base.goroutines+lk.Goroutines)})
	t.add(row{metric: "kurmad goroutines all (idle HTTP conns) after soak", p50: fmt.Sprintf("%d (%d)", lk.GoTotal, lk.HTTPConns)})
	t.add(row{metric: "kurmad threads boot / before soak / after", p50: fmt.Sprintf("%d / %d / %d", boot.threads, thrBefore, int(base.threads)+lk.Threads)})
	t.add(row{metric: "kurmad RSS boot / before soak / after", p50: fmt.Sprintf("%.1f / %.1f / %.1f MiB", mib(boot.rssKiB), mib(rssBefore), mib(lk.RSSKiB)),
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
	if err := d.Stop(45 * time.Second); err != nil {
		t.note("%v", err)
	}
	countRow(t, "mounts under its dirs after stop", len(d.Mounts()))
	countRow(t, "cgroup dirs after stop", len(d.CgroupDirs()))
	t.print(os.Stdout)
	return nil
}

// leakRows adds the soak's leak counts to t.
func leakRows(t *table, lk leaks) {
	countRow(t, "leaked veths on kt-bench0", lk.Veths)
	countRow(t, "leaked netns files", lk.NetnsFiles)
	countRow(t, "leaked pod dirs", lk.PodDirs)
	countRow(t, "leaked mounts (vs after boot)", lk.Mounts)
	countRow(t, "leaked host-local IP files", lk.IPFiles)
	countRow(t, "journal entries (GET /v1/pods)", lk.Journal)
	countRow(t, "leaked cgroup dirs (vs after boot)", lk.Cgroups)
	if lk.Goroutines == -1 {
		countRow(t, "goroutine growth (vs after boot)", -1)
	} else {
		countRow(t, "goroutine growth (vs after boot)", max(lk.Goroutines, 0))
	}
}

// countRow adds a count whose target is 0 (n < 0: unknown).
func countRow(t *table, metric string, n int) {
	r := row{metric: metric, p50: fmt.Sprint(n), tgt: "0", met: yesNo(n == 0)}
	if n < 0 {
		r.p50, r.met = "unknown", "?"
	}
	t.add(r)
}

// bootToReady is section 5: three networks, one cold boot and o.boots warm
// ones, process start to all networks running.
func (b *bench) bootToReady() error {
	o := b.o
	t := &table{title: "boot-to-ready: warm image cache (process start → all networks running)"}
	var memRows []row
	anchor, aerr := runcStartCPU(b.ctx, b.dir)
	if aerr != nil {
		t.note("CPU per container start's anchor: %v", aerr)
	}
	for _, nets := range [][]netSpec{benchNets, bootNets(20)} {
		progress("boot: %d networks, 1 cold + %d warm boots", len(nets), o.boots)
		d, err := newDaemon(filepath.Join(o.bin, "kurmad"), filepath.Join(b.dir, fmt.Sprintf("boot%d", len(nets))), b.aci, nets)
		if err != nil {
			return err
		}
		b.cl.add(func() { shutdown(d) })
		var cold, coldCPU time.Duration
		var warm, warmCPU dist
		for i := 0; i <= o.boots; i++ {
			// The cgroup parent outlives nothing of a stopped kurmad:
			// none before its start reads 0.
			before, _ := cgroupCPU(d.RunDir)
			if err := d.Start(); err != nil {
				return err
			}
			took, err := d.waitReady(b.ctx, 2*time.Minute)
			if err != nil {
				return fmt.Errorf("boot %d: %w", i, err)
			}
			cpu, cerr := bootCPU(d, before)
			if cerr != nil {
				t.note("boot %d: CPU: %v", i, cerr)
			}
			perStart := cpu / time.Duration(len(nets))
			if i == 0 {
				cold, coldCPU = took, perStart
			} else {
				warm = append(warm, took)
				warmCPU = append(warmCPU, perStart)
			}
			if err := d.Stop(45 * time.Second); err != nil {
				t.note("boot %d: %v", i, err)
			}
		}
		adopt, mem, err := b.adoptedBoots(d, t)
		if err != nil {
			return err
		}
		if len(nets) == 20 { // idle since the first boot after a restart
			memRows = memoryRows(mem)
		}
		cr := row{metric: fmt.Sprintf("cold boot, %d networks (image fetched from file://)", len(nets)), p50: ms(cold)}
		wr := distRow(fmt.Sprintf("warm boot, %d networks (every container started)", len(nets)), warm)
		ar := distRow(fmt.Sprintf("warm boot after a restart, %d networks (containers adopted)", len(nets)), adopt)
		if len(nets) == 20 {
			cr.tgt, cr.met = "≤"+ms(coldBootGoal), yesNo(cold <= coldBootGoal)
			wr.tgt, wr.met = "≤"+ms(warmBootGoal)+" p50", yesNo(warm.median() <= warmBootGoal)
		}
		if len(nets) == 20 {
			ar.tgt, ar.met = "≤"+ms(adoptBootGoal)+" p50", yesNo(adopt.median() <= adoptBootGoal)
		}
		ccr := row{metric: fmt.Sprintf("CPU per container start, cold boot, %d networks", len(nets)), p50: ms(coldCPU)}
		wcr := distRow(fmt.Sprintf("CPU per container start, warm boot, %d networks", len(nets)), warmCPU)
		if len(nets) == 20 {
			wcr.tgt, wcr.met = "≤"+ms(startCPUGoal)+" p50", yesNo(warmCPU.median() <= startCPUGoal)
			if len(anchor) > 0 {
				wcr.anchor = "runc run " + ms(anchor.median())
				wcr.ratio = fmt.Sprintf("%.2f×", ratio(warmCPU.median(), anchor.median()))
			}
		}
		t.add(cr)
		t.add(wr)
		t.add(ar)
		t.add(ccr)
		t.add(wcr)
	}
	if len(anchor) > 0 {
		t.add(distRow("anchor: CPU of a `runc run` of a no-op static binary (host net and UTS, as a plugin container)", anchor))
		t.note("the anchor is the runc on PATH (runc %s), %d runs, each one's CPU with its init's and the no-op's: what any container's start and teardown cost on this machine, before kurma's agent and main run in it", runcVersion(), runcRuns)
	}
	for _, r := range memRows {
		t.add(r)
	}
	if memRows != nil {
		t.note("memory per idle network: measured before the last boot's stop, 20 networks idle since the first boot after a restart; its processes are its container's (the agent, the main executable; kurma-init is kurmad's, one for every start, gone with it); kernel memory is what its cgroup is charged (memory.kmem.usage_in_bytes on cgroup v1, memory.stat's kernel on v2)")
	}
	t.note("the goals are for 20 networks; their configs differ only in name and subnet, so the image is fetched once")
	t.note("CPU per container start: kurmad's (and what it reaped), kurma-init's and the containers' cgroups' CPU from kurmad's start to every network running, divided by the networks (the cold boot's includes the image's import)")
	t.print(os.Stdout)
	return nil
}

// adoptedBoots times o.boots boots after a restart: SIGTERM left the
// containers running, the next kurmad adopts them (the first of these
// boots starts them). Before the last stop, which stops them, it measures
// the idle networks' memory.
func (b *bench) adoptedBoots(d *daemon, t *table) (dist, []netMemory, error) {
	var adopt dist
	var mem []netMemory
	d.StopPlugins = false
	for i := 0; i <= b.o.boots; i++ {
		if err := d.Start(); err != nil {
			return nil, nil, err
		}
		took, err := d.waitReady(b.ctx, 2*time.Minute)
		if err != nil {
			return nil, nil, fmt.Errorf("boot after a restart %d: %w", i, err)
		}
		if i > 0 {
			adopt = append(adopt, took)
		}
		if i == b.o.boots {
			d.StopPlugins = true
			if mem, err = idleNetworkMemory(d); err != nil {
				t.note("memory per idle network: %v", err)
			}
		}
		if err := d.Stop(45 * time.Second); err != nil {
			t.note("boot after a restart %d: %v", i, err)
		}
	}
	return adopt, mem, nil
}

// bootNets are n networks for the boot rows: they only boot, so their
// bridges (kt-boot<i>) are never made; subnets are /24s of 10.206.192.0/18.
func bootNets(n int) []netSpec {
	out := make([]netSpec, n)
	for i := range out {
		out[i] = netSpec{Name: fmt.Sprintf("boot%d", i), Bridge: fmt.Sprintf("kt-boot%d", i), Subnet: fmt.Sprintf("10.206.%d.0/24", 192+i)}
	}
	return out
}

// pull is section 6: docker:// pulls by kurma's fetcher against skopeo.
func (b *bench) pull() {
	progress("pull: local registry, %d cold pulls each", b.o.pulls)
	t := &table{title: "docker:// pull of cni-netplugin from a local registry (fresh store each pull)"}
	if err := benchPull(b.ctx, b.o, b.dir, t); err != nil {
		t.note("pull section failed: %v", err)
	}
	t.print(os.Stdout)
}

// execAgent is section 7: the exec agent's overhead (pkg/networkpod's
// benchmarks), unless -gobench 0.
func (b *bench) execAgent() {
	o := b.o
	if o.goBenchN <= 0 {
		return
	}
	progress("networkpod benchmarks %v, %d rounds interleaved (%dx in all)", goBenchNames, goBenchRounds, o.goBenchN)
	t := &table{title: fmt.Sprintf("networkpod exec of a no-op static binary, a call's view and its trespass watch (%d iterations each; p50 column: the median of %d runs' mean per op)", o.goBenchN, goBenchRounds)}
	res, out, err := runGoBench(b.ctx, o.repo, b.dir, o.goBenchN)
	if err != nil {
		t.note("%v\n%s", err, tailLines(out, 15))
	}
	var direct time.Duration
	for _, g := range res {
		if g.name == "BenchmarkDirectExec" {
			direct = g.perOp
		}
	}
	for _, g := range res {
		r := row{metric: fmt.Sprintf("%s (n=%d)", g.name, g.n), p50: ms(g.perOp)}
		if direct > 0 && g.name != "BenchmarkDirectExec" && g.name != "BenchmarkCallView" {
			r.anchor = "DirectExec " + ms(direct)
			r.ratio = fmt.Sprintf("%.2f×", ratio(g.perOp, direct))
			if g.name == "BenchmarkExecParallel" {
				r.ratio += " (parallel: ns/op is wall/ops)"
			}
		}
		t.add(r)
	}
	t.note("each benchmark runs %d times, a test process each, their order reversed every other round; CallView is the mount namespace a plugin call sees (one pod's netns), made and dropped on a locked OS thread, kurmad's own cost per call; TrespassWatch is the watch of the pods' namespaces for one call (begun and ended: the notifications queued read), kurmad's own cost per call, beside a call's", goBenchRounds)
	t.print(os.Stdout)
}
