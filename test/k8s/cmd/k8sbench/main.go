// Command k8sbench is `make k8s-bench`: in one single-node cluster (see
// package k8stest), a Deployment scaled from 0 to N replicas through kurma
// (the shipped DaemonSet, kurma-cni → kurmad → the cni-netplugin image)
// against the same plugin binaries and config installed on the node as
// its own CNI plugins: the time until all N are Ready, and containerd's
// RunPodSandbox p50, each as a ratio (goal ≤ 1.10×, DESIGN.md's
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
	flag.Parse()
	nodes, err := k8stest.NodesFromEnv()
	if err == nil {
		if nodes >= 2 {
			err = runNodes(*repo, *kube, nodes, *replicas, *rounds)
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
	ready     []time.Duration
	sandboxes []time.Duration
	failed    int
}

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
	if err := b.apply(ctx, deployment); err != nil {
		return err
	}
	kurma := &side{name: "kurma"}
	if err := b.measure(ctx, kurma, rounds); err != nil {
		return err
	}

	b.logf("uninstalling kurma; installing the same plugins and config on the node")
	if _, err := c.Kubectl(ctx, "delete", "-f", manifest, "--wait=true", "--timeout=3m"); err != nil {
		return err
	}
	if err := b.waitNodeReady(ctx, k8stest.NodeName, false); err != nil {
		return err
	}
	if err := hostPlugins(repo, c.PodCIDR); err != nil {
		return err
	}
	if err := b.waitNodeReady(ctx, k8stest.NodeName, true); err != nil {
		return err
	}
	plain := &side{name: "host plugins"}
	if err := b.measure(ctx, plain, rounds); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "delete", "deploy/bench", "--wait=true"); err != nil {
		return err
	}
	if err := os.Remove("/etc/cni/net.d/10-hostnet.conflist"); err != nil {
		return err
	}
	report(os.Stdout, replicas, kurma, plain)
	return nil
}

type bench struct {
	c        *k8stest.Cluster
	repo     string // kurma's repository, absolute
	replicas int
	logf     func(string, ...any)
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
		// port left on the bridge both sides use).
		veths := 0
		for _, n := range b.c.Nodes {
			ports, _ := os.ReadDir(n.Path("/sys/class/net/kurma0/brif"))
			veths += len(ports)
		}
		if len(list.Items) == 0 && veths == 0 {
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

// hostPlugins installs, as the node's own CNI network, the plugins of
// kurma's image (images/out/bin, the binaries cni-netplugin holds) with
// podnet's config from the shipped manifest: bridge kurma0, host-local on
// the node's pod CIDR, portmap, bandwidth.
func hostPlugins(repo, podCIDR string) error {
	for _, p := range []string{"bridge", "host-local", "portmap", "bandwidth"} {
		b, err := os.ReadFile(filepath.Join(repo, "images/out/bin", p))
		if err != nil {
			return fmt.Errorf("%w (make images)", err)
		}
		if err := os.WriteFile(filepath.Join("/opt/cni/bin", p), b, 0o755); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "hostnet", "plugins": [
  {"type": "bridge", "bridge": "kurma0", "isGateway": true, "ipMasq": true, "ipMasqBackend": "nftables", "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": true}},
  {"type": "bandwidth", "capabilities": {"bandwidth": true}}
]}
`, podCIDR)
	return os.WriteFile("/etc/cni/net.d/10-hostnet.conflist", []byte(conf), 0o644)
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

func report(w io.Writer, replicas int, kurma, plain *side) {
	fmt.Fprintf(w, "\n## Kubernetes (one node, containerd %s; through kurma vs the same plugins as the node's own CNI)\n\n", "1.6")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tkurma p50\tp90\tanchor (host plugins) p50/p90\tratio p50\tgoal\tmet")
	row := func(metric string, k, p []time.Duration) {
		r := float64(pct(k, 50)) / float64(max(pct(p, 50), 1))
		met := "no"
		if r <= 1.10 {
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s / %s\t%.2f×\t≤1.10×\t%s\n", metric, ms(pct(k, 50)), ms(pct(k, 90)), ms(pct(p, 50)), ms(pct(p, 90)), r, met)
	}
	row(fmt.Sprintf("Deployment 0→%d until all Ready (n=%d)", replicas, len(kurma.ready)), kurma.ready, plain.ready)
	row(fmt.Sprintf("RunPodSandbox (n=%d)", len(kurma.sandboxes)), kurma.sandboxes, plain.sandboxes)
	tw.Flush()
	if kurma.failed+plain.failed > 0 {
		fmt.Fprintf(w, "\nfailed RunPodSandbox attempts (retried by the kubelet): kurma %d, host plugins %d\n", kurma.failed, plain.failed)
	}
}
