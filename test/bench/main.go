// Command bench is `make bench`: kurmad measured against the CNI floor
// (libcni calling the same plugin binaries directly), throughput at 1, 4
// and 16 clients, kurmactl against ip netns + cnitool as whole processes,
// GET /v1/pods with 1000 pods, boot-to-ready, docker:// pulls against
// skopeo + tar, a soak that counts what it leaks, and the exec-agent
// overhead. Each figure with a goal (issue 13) prints it and whether it
// was met. It prints one
// table per section and never fails on a number; it exits non-zero only
// when it could not measure.
//
// It needs root and uses only the bridges kt-bench0..2 and 10.206.0.0/16,
// podman (a private config) and cnitool for the runtimes section,
// state and run dirs under a temp dir, and removes everything it made at
// the end, also on error or SIGINT/SIGTERM.
//
//	go run -tags containers_image_openpgp ./test/bench [-n 200] [-soak 1000] [-only runtimes]
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
)

// The bench's kernel objects (named as docs/architecture.md says for tests):
// 10.206.0.0/16 split into /18s, one bridge each.
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
	block             int // sequential cycles per side before the other side's turn
	tput              int
	boots, pulls      int
	goBenchN          int
	whole, listPods   int
	listGets          int
	podman, cnitool   int
	only              string
	level             string // the timed kurmad's --log-level
	breakdownN        int    // cycles of the debug-level pass (0: none)
	profile, trace    string
	profileClients    int
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
	flag.StringVar(&o.bin, "bin", "", "dir with kurmad, kurma-init and kurma-agent (default <repo>/bin)")
	flag.StringVar(&o.images, "images", "", "dir `make images` wrote (default <repo>/images/out)")
	flag.IntVar(&o.n, "n", 200, "timed attach/detach iterations (after warm-up)")
	flag.IntVar(&o.warmup, "warmup", 20, "warm-up iterations")
	flag.IntVar(&o.block, "block", 10, "floor and kurmad cycles alternate in blocks of this many, so both sides see the same load")
	flag.IntVar(&o.tput, "tput", 200, "pods per throughput level")
	flag.IntVar(&o.soak, "soak", 1000, "pods created and deleted by the soak (concurrency 16)")
	flag.IntVar(&o.boots, "boots", 5, "warm boots timed for boot-to-ready")
	flag.IntVar(&o.pulls, "pulls", 3, "cold pulls per tool")
	flag.IntVar(&o.goBenchN, "gobench", 200, "iterations of the networkpod exec benchmarks (0: skip)")
	flag.IntVar(&o.whole, "whole", 30, "timed cycles of the whole-process comparison (kurmactl vs cnitool; 0: skip)")
	flag.IntVar(&o.listPods, "listpods", 1000, "pods on kurmad while GET /v1/pods is timed (0: skip)")
	flag.IntVar(&o.listGets, "listgets", 20, "timed GETs of /v1/pods and /v1/info")
	flag.IntVar(&o.podman, "podman", 20, "timed podman start/rm rounds per network in the runtimes section")
	flag.IntVar(&o.cnitool, "cnitool", 50, "timed cnitool add/del rounds per network in the runtimes section")
	flag.StringVar(&o.level, "level", "info", "log level of the kurmad whose rows carry the goals (info: kurmad's default; debug: the level of runs before issue 13 round 3, which also logged JSON)")
	flag.IntVar(&o.breakdownN, "breakdown", 100, "create/delete cycles of the separate debug-level kurmad whose log gives \"where the time goes\" (0: skip)")
	flag.StringVar(&o.only, "only", "", "run only this section: attach (attach and detach against their floor, with where the time goes), throughput (pods/s at 1, 4 and 16 clients, kurmad and floor), runtimes, boot (boot to ready), list (the journal and reads at scale), exec (the exec agent, a call's view and its trespass watch: pkg/networkpod's benchmarks), or profile (kurmad booted, then -profile and -trace only)")
	flag.StringVar(&o.profile, "profile", "", "write a 10s CPU profile of kurmad under create/delete load to this file")
	flag.IntVar(&o.profileClients, "profile-clients", 4, "clients creating and deleting pods while -profile records")
	flag.StringVar(&o.trace, "trace", "", "write a 5s execution trace of kurmad under sequential create/delete to this file (go tool trace -pprof=syscall|sync|net FILE)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (logs) instead of removing it")
	serve := flag.String("roundtrip-serve", "", "internal: serve the HTTP round trip's anchor on this socket")
	flag.Parse()
	if *serve != "" {
		if err := roundTripServe(*serve); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if o.bin == "" {
		o.bin = filepath.Join(o.repo, "bin")
	}
	o.block = max(o.block, 1)
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
	for _, p := range []string{filepath.Join(o.bin, "kurmad"), filepath.Join(o.bin, "kurma-agent"), filepath.Join(o.bin, "kurma-init"), filepath.Join(o.bin, "kurma-cni"),
		filepath.Join(o.images, "cni-netplugin.aci"), filepath.Join(o.images, "bin", "bridge")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing: run `make build images` first: %w", p, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	b := &bench{o: o, ctx: ctx, aci: filepath.Join(o.images, "cni-netplugin.aci")}
	defer b.cl.run()
	if err := b.makeDir(); err != nil {
		return err
	}
	fmt.Printf("kurma bench  %s  cores (runtime.NumCPU)=%d  GOMAXPROCS=%d  load=%s  %s\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAvg(), kernel())
	fmt.Printf("iterations n=%d (warm-up %d), throughput %d pods/level, soak %d pods at 16 clients, runtimes %d podman / %d cnitool rounds\n",
		o.n, o.warmup, o.tput, o.soak, o.podman, o.cnitool)
	breakdown := fmt.Sprintf("from a separate kurmad at debug (JSON), %d cycles", o.breakdownN)
	if o.breakdownN <= 0 {
		breakdown = "skipped (-breakdown 0)"
	}
	fmt.Printf("kurmad at --log-level %s (text) in every timed row; \"where the time goes\" %s\n", o.level, breakdown)
	switch o.only {
	case "":
	case "runtimes":
		return b.runtimes()
	case "attach":
		_, _, _, err := b.attachSection()
		return err
	case "boot":
		return b.bootToReady()
	case "exec":
		b.execAgent()
		return nil
	case "throughput":
		fr, err := b.measureFloor()
		if err != nil {
			return err
		}
		d, _, err := b.bootDaemon()
		if err != nil {
			return err
		}
		return b.throughput(d, fr.fl)
	case "list":
		d, _, err := b.bootDaemon()
		if err != nil {
			return err
		}
		return b.listing(d)
	case "profile":
		if o.profile == "" && o.trace == "" {
			return errors.New("-only profile: give -profile FILE, -trace FILE or both")
		}
		d, _, err := b.bootDaemon()
		if err != nil {
			return err
		}
		b.profile(d)
		b.trace(d)
		return nil
	default:
		return fmt.Errorf("-only %q: the sections that run alone are: attach, throughput, runtimes, boot, list, exec, profile", o.only)
	}

	fr, d, boot, err := b.attachSection()
	if err != nil {
		return err
	}
	if err := b.throughput(d, fr.fl); err != nil {
		return err
	}
	if o.whole > 0 {
		if err := b.wholeProcess(d, fr.fl); err != nil {
			return err
		}
	}
	if o.listPods > 0 {
		if err := b.listing(d); err != nil {
			return err
		}
	}
	b.profile(d)
	b.trace(d)
	if err := b.soak(d, boot); err != nil {
		return err
	}
	if err := b.bootToReady(); err != nil {
		return err
	}
	b.pull()
	b.execAgent()
	if err := b.runtimes(); err != nil {
		return err
	}
	fmt.Printf("\nload at the end: %s\n", loadAvg())
	return nil
}

// attachSection measures the floor, runs the debug pass and boots the
// kurmad of the timed rows, then times its attach and detach against the
// floor; the later sections run on that kurmad.
func (b *bench) attachSection() (*floorResult, *daemon, bootState, error) {
	var boot bootState
	fr, err := b.measureFloor()
	if err != nil {
		return nil, nil, boot, err
	}
	dbg, err := b.debugPass()
	if err != nil {
		return nil, nil, boot, err
	}
	d, boot, err := b.bootDaemon()
	if err != nil {
		return nil, nil, boot, err
	}
	return fr, d, boot, b.attachDetach(d, fr, dbg)
}

func benchPull(ctx context.Context, o options, dir string, t *table) error {
	reg, err := startRegistry(ctx, filepath.Join(o.images, "cni-netplugin"), "v1")
	if err != nil {
		return err
	}
	defer reg.close()
	// The two sides alternate pull by pull, so both see the same load.
	skopeo, lookErr := exec.LookPath("skopeo")
	var kurma, sk, skTar dist
	skErr := lookErr
	for i := 0; i < o.pulls; i++ {
		d, err := pullKurma(ctx, reg, filepath.Join(dir, "pull", fmt.Sprintf("kurma-%d", i)))
		if err != nil {
			return fmt.Errorf("kurma pull: %w", err)
		}
		kurma = append(kurma, d)
		if skErr != nil {
			continue
		}
		skDir := filepath.Join(dir, "pull", fmt.Sprintf("skopeo-%d", i))
		d, err = pullSkopeo(ctx, skopeo, reg, skDir)
		var u time.Duration
		if err == nil {
			u, err = untarLayers(ctx, filepath.Join(skDir, "out"))
		}
		if err != nil {
			t.note("skopeo: %v", err)
			sk, skTar, skErr = nil, nil, err
			continue
		}
		sk, skTar = append(sk, d), append(skTar, d+u)
	}
	kr := row{metric: fmt.Sprintf("kurma imagefetch docker:// (pull+verify+unpack, n=%d)", len(kurma)), p50: ms(kurma.median())}
	if len(sk) > 0 {
		kr.anchor = "skopeo+tar " + ms(skTar.median())
		kr.ratio = fmt.Sprintf("%.2f×", ratio(kurma.median(), skTar.median()))
		kr.tgt = fmt.Sprintf("≤%.2f×", pullGoal)
		kr.met = yesNo(ratio(kurma.median(), skTar.median()) <= pullGoal)
	}
	t.add(kr)
	if len(sk) > 0 {
		t.add(row{metric: fmt.Sprintf("skopeo copy → oci: layout + tar -xf of its layers (n=%d)", len(skTar)), p50: ms(skTar.median())})
		t.add(row{metric: fmt.Sprintf("  of which skopeo copy (n=%d)", len(sk)), p50: ms(sk.median())})
	} else {
		t.add(row{metric: "skopeo copy", p50: "skipped"})
		if lookErr != nil {
			t.note("skopeo is not installed (scripts/need-packages skopeo=skopeo could not install it)")
		}
	}
	t.note("p50 is the median of the cold pulls, each into a fresh store, the two sides alternating pull by pull; both fetch, verify and unpack the same image from the same local registry")
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
