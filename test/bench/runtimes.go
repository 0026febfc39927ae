package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// runtimesBench is the section on real runtimes (issue 9): the same
// bridge + host-local + portmap config as a runtime's own CNI network
// (the plugin binaries of the image, installed on the host) and as a kurma
// network that the runtime reaches through kurma-cni → kurmad → the image.
// Both run on kt-bench1; the rounds alternate between them.
type runtimesBench struct {
	b      *bench
	dir    string
	cniBin string // the host's CNI plugins: the image's, kurma-cni, cnitool
	netd   string // the runtimes' conflists: kbplain and kbkurma
	kurmad *testutil.Kurmad
}

const (
	rtPlain = "kbplain" // the plugins on the host
	rtKurma = "kbkurma" // kurma-cni → kurmad → the image
)

// runtimes measures podman's container start-to-ready and rm, and
// cnitool's ADD and DEL, on both networks.
func (b *bench) runtimes() error {
	progress("runtimes: podman and cnitool, host plugins vs kurma-cni → kurmad")
	rb := &runtimesBench{b: b, dir: filepath.Join(b.dir, "rt")}
	if err := rb.setup(); err != nil {
		return fmt.Errorf("runtimes: %w", err)
	}
	t := &table{title: "runtimes: podman and cnitool on bridge+host-local+portmap, host plugins vs through kurma-cni (ms)"}
	if err := rb.podman(t); err != nil {
		return fmt.Errorf("runtimes: podman: %w", err)
	}
	if err := rb.cnitool(t); err != nil {
		return fmt.Errorf("runtimes: cnitool: %w", err)
	}
	t.note("plain: the conflist with the image's own plugin binaries installed on the host; kurma: kurma-cni with the same plugins in kurmad's network (portmap's nftables backend in both)")
	t.note("ratio is p50 against p50 (p99 against p99 after the slash); rounds alternate between the two")
	t.print(os.Stdout)
	return nil
}

func (rb *runtimesBench) plugins(dataDir string) []map[string]any {
	n := benchNets[1]
	ipam := map[string]any{"type": "host-local", "subnet": n.Subnet}
	if dataDir != "" {
		ipam["dataDir"] = dataDir
	}
	return []map[string]any{
		{"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipam": ipam},
		{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "backend": "nftables"},
	}
}

// setup boots kurmad with network rtbench, and fills the host's CNI bin dir
// and the conflists.
func (rb *runtimesBench) setup() error {
	b := rb.b
	rb.cniBin, rb.netd = filepath.Join(rb.dir, "cni"), filepath.Join(rb.dir, "net.d")
	for _, d := range []string{rb.cniBin, rb.netd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if err := os.Symlink(filepath.Join(b.o.images, "bin", p), filepath.Join(rb.cniBin, p)); err != nil {
			return err
		}
	}
	if err := os.Symlink(filepath.Join(b.o.bin, "kurma-cni"), filepath.Join(rb.cniBin, "kurma-cni")); err != nil {
		return err
	}
	if err := testutil.GoBuild(rb.cniBin, testutil.BuildOptions{}, "github.com/containernetworking/cni/cnitool"); err != nil {
		return err
	}
	k, err := testutil.NewKurmad(filepath.Join(b.o.bin, "kurmad"), filepath.Join(b.dir, "rtd"))
	if err != nil {
		return err
	}
	k.StopPlugins = true // nothing of it outlives the section
	rb.kurmad = k
	b.cl.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if k.Running() {
			if err := k.RemoveAllPods(ctx); err != nil {
				progress("cleanup: %v", err)
			}
		}
		if err := k.Cleanup(45 * time.Second); err != nil {
			progress("cleanup: %v", err)
		}
	})
	if err := k.WriteConfig(map[string]any{"plugin_timeout": "30s", "pod_networks": []map[string]any{{
		"name": "rtbench", "image": "file://" + b.aci, "cniVersion": "1.0.0", "plugins": rb.plugins(""),
	}}}); err != nil {
		return err
	}
	if err := k.Start(); err != nil {
		return err
	}
	if _, err := k.WaitReady(b.ctx, 2*time.Minute, []string{"rtbench"}); err != nil {
		return err
	}
	conflists := map[string]any{
		rtPlain: map[string]any{"cniVersion": "1.0.0", "name": rtPlain, "plugins": rb.plugins(filepath.Join(rb.dir, "ipam"))},
		rtKurma: map[string]any{"cniVersion": "1.0.0", "name": rtKurma, "plugins": []map[string]any{{
			"type": "kurma-cni", "network": "rtbench", "socket": k.Socket, "capabilities": map[string]bool{"portMappings": true}}}},
	}
	for name, c := range conflists {
		data, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(rb.netd, name+".conflist"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// podman times `podman run -d -p PORT:80` of a busybox httpd until the host
// gets its page on 127.0.0.1:PORT (start-to-ready), and `podman rm -f -t 0`.
func (rb *runtimesBench) podman(t *table) error {
	b := rb.b
	pdir := filepath.Join(rb.dir, "podman")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return err
	}
	conflists := map[string][]byte{}
	for _, n := range []string{rtPlain, rtKurma} {
		data, err := os.ReadFile(filepath.Join(rb.netd, n+".conflist"))
		if err != nil {
			return err
		}
		conflists[n] = data
	}
	pm, err := testutil.NewPodman(pdir, rb.cniBin, conflists)
	if err != nil {
		return err
	}
	b.cl.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := pm.Cleanup(ctx); err != nil {
			progress("cleanup: %v", err)
		}
	})
	root := filepath.Join(rb.dir, "rootfs")
	if err := testutil.BusyboxRootfs(root, "bench"); err != nil {
		return err
	}
	start := map[string]dist{}
	rm := map[string]dist{}
	warm := 3
	for i := 0; i < warm+b.o.podman; i++ {
		for _, n := range []string{rtPlain, rtKurma} {
			if b.ctx.Err() != nil {
				return b.ctx.Err()
			}
			s, r, err := podmanOnce(b.ctx, pm, root, n, i)
			if err != nil {
				return err
			}
			if i >= warm {
				start[n], rm[n] = append(start[n], s), append(rm[n], r)
			}
		}
	}
	addPair(t, "podman run -d -p until 127.0.0.1:PORT answers", start, 1.10)
	addPair(t, "podman rm -f -t 0", rm, 1.10)
	return nil
}

// podmanOnce starts one container on network n and removes it.
func podmanOnce(ctx context.Context, pm *testutil.Podman, root, n string, i int) (start, rm time.Duration, err error) {
	port, err := testutil.FreePort()
	if err != nil {
		return 0, 0, err
	}
	name := fmt.Sprintf("kb-%s-%d", n, i)
	t0 := time.Now()
	if _, err := pm.Run(ctx, "run", "-d", "--name", name, "--network", n, "-p", fmt.Sprintf("%d:80", port),
		"--rootfs", root, "/bin/httpd", "-f", "-p", "80", "-h", "/www"); err != nil {
		return 0, 0, err
	}
	if err := waitPage(ctx, port); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	start = time.Since(t0)
	t1 := time.Now()
	if _, err := pm.Run(ctx, "rm", "-f", "-t", "0", name); err != nil {
		return 0, 0, err
	}
	return start, time.Since(t1), nil
}

// waitPage polls http://127.0.0.1:port/ until it answers 200 (10 s at
// most): the container runs and its port mapping is in place. No event
// announces httpd listening, so it polls with testutil.Poll like the tests.
func waitPage(ctx context.Context, port int) error {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	return testutil.Poll(ctx, 10*time.Second, url+" to answer 200", func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

// cnitool times `cnitool add` and `cnitool del` of each network on a
// fresh netns (made and removed untimed).
func (rb *runtimesBench) cnitool(t *table) error {
	b := rb.b
	add, del := map[string]dist{}, map[string]dist{}
	warm, n := 5, b.o.cnitool
	nsDir := filepath.Join(rb.dir, "ns")
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return err
	}
	for i := 0; i < warm+n; i++ {
		for _, network := range []string{rtPlain, rtKurma} {
			if b.ctx.Err() != nil {
				return b.ctx.Err()
			}
			ns := filepath.Join(nsDir, fmt.Sprintf("%s-%d", network, i))
			if err := netnsfile.Create(ns); err != nil {
				return err
			}
			a, err := rb.cnitoolRun(b.ctx, "add", network, ns)
			if err != nil {
				_ = netnsfile.Remove(ns)
				return err
			}
			d, err := rb.cnitoolRun(b.ctx, "del", network, ns)
			_ = netnsfile.Remove(ns)
			if err != nil {
				return err
			}
			if i >= warm {
				add[network], del[network] = append(add[network], a), append(del[network], d)
			}
		}
	}
	addPair(t, "cnitool add", add, 0)
	addPair(t, "cnitool del", del, 0)
	// Issue 39's goal is on the pair: one attachment's add and del.
	both := map[string]dist{}
	for network, a := range add {
		for i := range a {
			both[network] = append(both[network], a[i]+del[network][i])
		}
	}
	addPair(t, "cnitool add+del", both, cnitoolGoal)
	return nil
}

// cnitoolGoal bounds cnitool's add+del through kurma-cni against the
// plain plugins' (issue 39).
const cnitoolGoal = 1.10

func (rb *runtimesBench) cnitoolRun(ctx context.Context, verb, network, ns string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(rb.cniBin, "cnitool"), verb, network, ns)
	cmd.Env = append(os.Environ(), "CNI_PATH="+rb.cniBin, "NETCONFPATH="+rb.netd)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("cnitool %s %s: %v\n%s", verb, network, err, out)
	}
	return time.Since(t0), nil
}

// addPair adds metric's two rows: through kurma-cni against the plain
// plugins, then the plain plugins.
func addPair(t *table, metric string, d map[string]dist, limit float64) {
	t.add(vsAnchor(metric+", kurma", d[rtKurma], d[rtPlain], "plain", limit))
	t.add(distRow(metric+", plain", d[rtPlain]))
}

// vsAnchor is a timing row with its ratio to anchor's p50 (and p99), and
// the target when limit > 0.
func vsAnchor(metric string, d, anchor dist, anchorName string, limit float64) row {
	r := distRow(metric, d)
	if len(d) == 0 || len(anchor) == 0 {
		return r
	}
	r50, r99 := ratio(d.pct(50), anchor.pct(50)), ratio(d.pct(99), anchor.pct(99))
	r.anchor = fmt.Sprintf("%s %s/%s", anchorName, ms(anchor.pct(50)), ms(anchor.pct(99)))
	r.ratio = fmt.Sprintf("%.2f×/%.2f×", r50, r99)
	if limit > 0 {
		r.tgt = fmt.Sprintf("≤%.2f× p50", limit)
		r.met = yesNo(r50 <= limit)
	}
	return r
}
