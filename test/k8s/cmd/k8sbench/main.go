// Command k8sbench is `make k8s-bench`: in one single-node cluster (see
// package k8stest), a Deployment scaled from 0 to N replicas through kurma
// (the shipped DaemonSet, kurma-cni → kurmad → the cni-netplugin image)
// against the same plugin binaries and config installed on the node as
// its own CNI plugins: the time until all N are Ready, and containerd's
// RunPodSandbox p50, each as a ratio (goal ≤ 1.05×, issue 27; DESIGN.md's
// performance section). It prints the rows beside their anchor, as
// `make bench` does, and fails only when it could not measure.
//
//	go run ./cmd/k8sbench [-replicas 30] [-rounds 5]   (in test/k8s, after make image)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	k8stest "github.com/kurma-project/kurma/test/k8s"
)

func main() {
	k8stest.EnterNodeNamespace()
	repo := flag.String("repo", "../..", "kurma's repository (images/out/kurma.tar, images/out/bin, deploy/kubernetes)")
	kube := flag.String("kube", "out/kube", "the kube binary (cmd/kube)")
	replicas := flag.Int("replicas", 30, "the Deployment's replicas")
	rounds := flag.Int("rounds", 5, "measured rounds per side (after one warm-up round)")
	policy := flag.Bool("policy", true, "with 2 or more nodes: the NetworkPolicy rows (make netpol first)")
	flag.Parse()
	nodes, err := k8stest.NodesFromEnv()
	if err == nil {
		if nodes >= 2 {
			err = runNodes(*repo, *kube, nodes, *replicas, *rounds, *policy)
		} else {
			err = run(*repo, *kube, *replicas, *rounds)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-bench:", err)
		os.Exit(1)
	}
}

type side struct {
	name      string
	host      bool // the host plugins' side
	ready     []time.Duration
	sandboxes []time.Duration
	failed    int
}

// run measures the two sides of one node interleaved round by round, the
// side going first alternating, so both see the same load: kurma stays
// installed and warm throughout (its DaemonSet, kurmad and its plugin
// containers), and a host-plugin round puts the same plugins' conflist in
// the node's CNI config dir under a name that sorts before kurma's
// (containerd uses the first), removed again for a kurma round. Each round
// checks which side served it from the leases of the host plugins'
// host-local.
func run(repo, kube string, replicas, rounds int) (err error) {
	b, err := startBench(repo, kube, 1, replicas)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	c, ctx := b.c, context.Background()
	repo = b.repo

	manifest := filepath.Join(repo, "deploy/kubernetes/kurma.yaml")
	if _, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=5m"); err != nil {
		return err
	}
	if err := b.waitNodeReady(ctx, k8stest.NodeName, true); err != nil {
		return err
	}
	if err := installHostPlugins(repo); err != nil {
		return err
	}
	defer func() {
		if rerr := os.Remove(hostConflist); rerr != nil && !os.IsNotExist(rerr) && err == nil {
			err = rerr
		}
	}()
	if err := b.apply(ctx, deployment); err != nil {
		return err
	}
	kurma := &side{name: "kurma"}
	plain := &side{name: "host plugins", host: true}
	for i := 0; i <= rounds; i++ {
		order := []*side{kurma, plain}
		if i%2 == 1 {
			order = []*side{plain, kurma}
		}
		for _, s := range order {
			if err := b.roundOf(ctx, s, i, c.PodCIDR); err != nil {
				return err
			}
		}
	}
	if _, err := c.Kubectl(ctx, "delete", "deploy/bench", "--wait=true"); err != nil {
		return err
	}
	report(os.Stdout, replicas, rounds, kurma, plain)
	return nil
}

// hostConflist is the host plugins' conflist while a round of theirs runs:
// it sorts before kurma-node's 00-kurma.conflist, so containerd (which
// reloads the dir when it changes) uses it.
const hostConflist = "/etc/cni/net.d/00-hostnet.conflist"

// hostLeases is the host plugins' host-local data dir.
const hostLeases = "/var/lib/cni/networks/hostnet"

// roundOf runs round i (0: the warm-up) of side s: the node's CNI config
// switched to s, the round, and a check that s's plugins served it.
func (b *bench) roundOf(ctx context.Context, s *side, i int, podCIDR string) error {
	if s.host {
		// Whole or not at all: containerd reloads on every event in the
		// dir, and ignores a name without a CNI extension.
		tmp := hostConflist + ".tmp"
		if err := os.WriteFile(tmp, []byte(hostConf(podCIDR)), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, hostConflist); err != nil {
			return err
		}
	} else if err := os.Remove(hostConflist); err != nil && !os.IsNotExist(err) {
		return err
	}
	// While the pods run: the host plugins' host-local holds a lease for
	// each pod of theirs and none of kurma's (whose leases are in kurma's
	// state dir).
	b.whileReady = func() error {
		n := 0
		if entries, err := os.ReadDir(hostLeases); err == nil {
			for _, e := range entries {
				if strings.Count(e.Name(), ".") == 3 { // an IPv4 lease, not last_reserved_ip.0 or lock
					n++
				}
			}
		}
		if s.host && n < b.replicas || !s.host && n > 0 {
			return fmt.Errorf("%s round %d: %d leases of the host plugins with %d pods Ready: containerd did not use %s's CNI config", s.name, i, n, b.replicas, s.name)
		}
		return nil
	}
	ready, sandboxes, failed, err := b.round(ctx)
	b.whileReady = nil
	if err != nil {
		return fmt.Errorf("%s, round %d: %w", s.name, i, err)
	}
	b.logf("%s round %d%s: %d Ready in %s, RunPodSandbox p50 %s (%d sandboxes, %d failed attempts)", s.name, i,
		map[bool]string{true: " (warm-up)", false: ""}[i == 0], b.replicas, ready.Round(time.Millisecond),
		pct(sandboxes, 50).Round(100*time.Microsecond), len(sandboxes), failed)
	if i > 0 {
		s.ready = append(s.ready, ready)
		s.sandboxes = append(s.sandboxes, sandboxes...)
		s.failed += failed
	}
	return nil
}

type bench struct {
	c        *k8stest.Cluster
	repo     string // kurma's repository, absolute
	replicas int
	logf     func(string, ...any)
	// whileReady, when set, is called by round once all pods are Ready.
	whileReady func() error
	// policy adds the NetworkPolicy rows to the cross-node rounds.
	policy bool
}

// startBench starts a cluster of nodes with kurma's image (from kurma's
// repository at repo) imported on each; the caller closes b.c.
func startBench(repo, kube string, nodes, replicas int) (*bench, error) {
	repo, _ = filepath.Abs(repo)
	kube, _ = filepath.Abs(kube)
	moduleDir, _ := filepath.Abs(".")
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] "+f+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
	}
	need := []string{"images/out/kurma.tar", "images/out/bin/loopback"}
	if nodes >= 2 {
		need = append(need, "plugins/flannel/out/flanneld")
	}
	for _, p := range need {
		if _, err := os.Stat(filepath.Join(repo, p)); err != nil {
			return nil, fmt.Errorf("%w (make image)", err)
		}
	}
	c, err := k8stest.Start(context.Background(), k8stest.Options{Kube: kube, ModuleDir: moduleDir, Nodes: nodes,
		Archives: []string{filepath.Join(repo, "images/out/kurma.tar")}, CNIPlugins: []string{filepath.Join(repo, "images/out/bin/loopback")}, Logf: logf})
	if err != nil {
		return nil, err
	}
	return &bench{c: c, repo: repo, replicas: replicas, logf: logf}, nil
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: bench, namespace: default}
spec:
  replicas: 0
  selector: {matchLabels: {app: bench}}
  template:
    metadata: {labels: {app: bench}}
    spec:
      # Not 0: with 0 the API server drops a pod at once, before the
      # kubelet has stopped it, and a round would overlap the last's teardown.
      terminationGracePeriodSeconds: 1
      containers:
        - {name: bench, image: ` + k8stest.BusyboxImage + `, command: ["/bin/sleep", "3600"]}
`

func (b *bench) apply(ctx context.Context, doc string) error {
	f, err := os.CreateTemp("", "k8sbench-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(doc); err != nil {
		return err
	}
	f.Close()
	_, err = b.c.Kubectl(ctx, "apply", "-f", f.Name())
	return err
}

// measure runs a warm-up round and then rounds measured rounds.
func (b *bench) measure(ctx context.Context, s *side, rounds int) error {
	for i := 0; i <= rounds; i++ {
		ready, sandboxes, failed, err := b.round(ctx)
		if err != nil {
			return fmt.Errorf("%s, round %d: %w", s.name, i, err)
		}
		b.logf("%s round %d%s: %d Ready in %s, RunPodSandbox p50 %s (%d sandboxes, %d failed attempts)", s.name, i,
			map[bool]string{true: " (warm-up)", false: ""}[i == 0], b.replicas, ready.Round(time.Millisecond),
			pct(sandboxes, 50).Round(100*time.Microsecond), len(sandboxes), failed)
		if i == 0 {
			continue
		}
		s.ready = append(s.ready, ready)
		s.sandboxes = append(s.sandboxes, sandboxes...)
		s.failed += failed
	}
	return nil
}

// round scales the Deployment from 0 to the replicas, times it until all
// are Ready, reads the containerds' RunPodSandbox durations for its pods,
// and scales back to 0, waiting for the pods to go.
func (b *bench) round(ctx context.Context) (time.Duration, []time.Duration, int, error) {
	// Ports on the bridge both sides use, before: pods other than the
	// Deployment's (the NetworkPolicy rows' server and clients) keep theirs.
	bridgePorts := func() int {
		n := 0
		for _, node := range b.c.Nodes {
			ports, _ := os.ReadDir(node.Path("/sys/class/net/kurma0/brif"))
			n += len(ports)
		}
		return n
	}
	others := bridgePorts()
	offsets := map[*k8stest.Node]int64{}
	for _, n := range b.c.Nodes {
		fi, err := os.Stat(n.LogPath("containerd"))
		if err != nil {
			return 0, nil, 0, err
		}
		offsets[n] = fi.Size()
	}
	t0 := time.Now()
	if _, err := b.c.Kubectl(ctx, "scale", "deploy/bench", fmt.Sprintf("--replicas=%d", b.replicas)); err != nil {
		return 0, nil, 0, err
	}
	if _, err := b.c.Kubectl(ctx, "rollout", "status", "deploy/bench", "--timeout=5m"); err != nil {
		return 0, nil, 0, err
	}
	ready := time.Since(t0)
	if b.whileReady != nil {
		if err := b.whileReady(); err != nil {
			return 0, nil, 0, err
		}
	}
	var sandboxes []time.Duration
	failed := 0
	for n, off := range offsets {
		s, f, err := runPodSandbox(n.LogPath("containerd"), off, "bench-")
		if err != nil {
			return 0, nil, 0, err
		}
		sandboxes, failed = append(sandboxes, s...), failed+f
	}
	if _, err := b.c.Kubectl(ctx, "scale", "deploy/bench", "--replicas=0"); err != nil {
		return 0, nil, 0, err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var list struct{ Items []json.RawMessage }
		if err := b.c.KubectlJSON(ctx, &list, "get", "pods", "-l", "app=bench"); err != nil {
			return 0, nil, 0, err
		}
		// Gone from the API, and their sandboxes' networks torn down (no
		// port of theirs left on the bridge both sides use).
		veths := bridgePorts() - others
		if len(list.Items) == 0 && veths <= 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, nil, 0, fmt.Errorf("%d pods and %d veths still there 3 minutes after scaling to 0", len(list.Items), veths)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return ready, sandboxes, failed, nil
}

var sandboxLine = regexp.MustCompile(`^time="([^"]+)" level=\w+ msg="RunPodSandbox for &PodSandboxMetadata\{Name:([^,]+),Uid:([^,]+),.*?Attempt:(\d+),\}(.*)"$`)

// runPodSandbox reads containerd's log from offset and returns how long
// each RunPodSandbox of a pod whose name starts with prefix took, and how
// many failed.
func runPodSandbox(path string, offset int64, prefix string) ([]time.Duration, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, 0, err
	}
	started := map[string]time.Time{}
	var out []time.Duration
	failed := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sandboxLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.HasPrefix(m[2], prefix) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		key := m[3] + "/" + m[4]
		switch rest := m[5]; {
		case rest == "":
			started[key] = at
		case strings.HasPrefix(rest, " returns sandbox id"):
			if s, ok := started[key]; ok {
				out = append(out, at.Sub(s))
			}
		case strings.Contains(rest, "failed"):
			failed++
		}
	}
	return out, failed, sc.Err()
}

// waitNodeReady waits for node name's Ready condition to be want.
func (b *bench) waitNodeReady(ctx context.Context, name string, want bool) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var node struct {
			Status struct {
				Conditions []struct{ Type, Status string } `json:"conditions"`
			} `json:"status"`
		}
		if err := b.c.KubectlJSON(ctx, &node, "get", "node", name); err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == "Ready" && (cond.Status == "True") == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s's Ready is not %v after 3 minutes", name, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// installHostPlugins installs the plugins of kurma's image
// (images/out/bin, the binaries cni-netplugin holds) in the node's CNI bin
// dir, for hostConf.
func installHostPlugins(repo string) error {
	for _, p := range []string{"bridge", "host-local", "portmap", "bandwidth"} {
		b, err := os.ReadFile(filepath.Join(repo, "images/out/bin", p))
		if err != nil {
			return fmt.Errorf("%w (make images)", err)
		}
		if err := os.WriteFile(filepath.Join("/opt/cni/bin", p), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// hostConf is, as the node's own CNI network, podnet's config from the
// shipped manifest: bridge kurma0, host-local on the node's pod CIDR,
// portmap, bandwidth.
func hostConf(podCIDR string) string {
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "hostnet", "plugins": [
  {"type": "bridge", "bridge": "kurma0", "isGateway": true, "ipMasq": true, "ipMasqBackend": "nftables", "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": true}},
  {"type": "bandwidth", "capabilities": {"bandwidth": true}}
]}
`, podCIDR)
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// goal is issue 27's for both rows: at most 5% over the host plugins.
const goal = 1.05

func report(w io.Writer, replicas, rounds int, kurma, plain *side) {
	fmt.Fprintf(w, "\n## Kubernetes (one node, containerd %s; through kurma vs the same plugins as the node's own CNI)\n\n", "1.6")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tkurma p50\tp90\tanchor (host plugins) p50/p90\tratio p50\tgoal\tmet")
	row := func(metric string, k, p []time.Duration) {
		r := float64(pct(k, 50)) / float64(max(pct(p, 50), 1))
		met := "no"
		if r <= goal {
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s / %s\t%.2f×\t≤%.2f×\t%s\n", metric, ms(pct(k, 50)), ms(pct(k, 90)), ms(pct(p, 50)), ms(pct(p, 90)), r, goal, met)
	}
	row(fmt.Sprintf("Deployment 0→%d until all Ready (n=%d)", replicas, len(kurma.ready)), kurma.ready, plain.ready)
	row(fmt.Sprintf("RunPodSandbox (n=%d)", len(kurma.sandboxes)), kurma.sandboxes, plain.sandboxes)
	tw.Flush()
	fmt.Fprintf(w, "\nthe two sides interleaved round by round (%d rounds each after a warm-up round each, the side going first alternating); kurma stays installed throughout\n", rounds)
	if kurma.failed+plain.failed > 0 {
		fmt.Fprintf(w, "\nfailed RunPodSandbox attempts (retried by the kubelet): kurma %d, host plugins %d\n", kurma.failed, plain.failed)
	}
}
