package main

// The cross-node rows (K8S_NODES=2 or more): on an N-node cluster,
// kurma's flannel manifest as shipped (flanneld as the flannel image's
// main, pods attached through kurma-cni and kurmad) against the same
// flanneld and CNI plugins run on the nodes directly (k8stest.DirectFlannel),
// the two sides interleaved round by round (the side that goes first
// alternates): pod-to-pod TCP round-trip time and throughput from a pod on
// the first node to one on the last, and a Deployment scaled from 0 to N
// replicas spread over the nodes until all are Ready.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	k8stest "github.com/kurma-project/kurma/test/k8s"
)

type nodesSide struct {
	name   string
	up     func(ctx context.Context) error
	down   func(ctx context.Context) error
	rtt    []float64 // each round's p50, µs
	tput   []float64 // each round's Gbit/s
	ready  []time.Duration
	policy policySide // the NetworkPolicy rows (bench.policy)
}

func runNodes(repo, kube string, nodes, replicas, rounds int, policy bool) (err error) {
	b, err := startBench(repo, kube, nodes, replicas)
	if err != nil {
		return err
	}
	b.policy = policy
	defer func() {
		if cerr := b.c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	c, ctx := b.c, context.Background()
	repo = b.repo
	manifest := filepath.Join(repo, "deploy/kubernetes/flannel/kurma-flannel.yaml")
	direct := k8stest.NewDirectFlannel(c, repo)
	netpol := k8stest.NewDirectNetpol(repo)
	kurma := &nodesSide{name: "kurma", policy: policySide{name: "kurma"},
		up: func(ctx context.Context) error {
			if _, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
				return err
			}
			if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=5m"); err != nil {
				return err
			}
			return b.waitNodesReady(ctx, true)
		},
		// Deleting the DaemonSet uninstalls kurma from every node (its
		// namespace and config stay for the next round's apply).
		down: func(ctx context.Context) error {
			if _, err := c.Kubectl(ctx, "-n", "kurma-system", "delete", "ds/kurmad", "--wait=true", "--timeout=3m"); err != nil {
				return err
			}
			return b.waitNodesReady(ctx, false)
		}}
	plain := &nodesSide{name: "direct flannel", policy: policySide{name: "direct"},
		up: func(ctx context.Context) error {
			if err := direct.Start(ctx, c); err != nil {
				return err
			}
			if b.policy {
				if err := netpol.Start(ctx, c); err != nil {
					return err
				}
			}
			return b.waitNodesReady(ctx, true)
		},
		down: func(ctx context.Context) error {
			if b.policy {
				if err := netpol.Stop(ctx, c); err != nil {
					return err
				}
			}
			if err := direct.Stop(ctx, c); err != nil {
				return err
			}
			return b.waitNodesReady(ctx, false)
		}}
	if err := b.apply(ctx, spreadDeployment); err != nil {
		return err
	}
	for i := 0; i <= rounds; i++ {
		sides := []*nodesSide{kurma, plain}
		if i%2 == 1 {
			sides = []*nodesSide{plain, kurma}
		}
		for _, s := range sides {
			if err := b.nodesRound(ctx, s, i == 0); err != nil {
				return fmt.Errorf("%s, round %d: %w", s.name, i, err)
			}
		}
	}
	if _, err := c.Kubectl(ctx, "delete", "-f", manifest, "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
		return err
	}
	reportNodes(os.Stdout, nodes, replicas, kurma, plain)
	if b.policy {
		reportPolicy(os.Stdout, replicas, &kurma.policy, &plain.policy)
	}
	return nil
}

// spreadDeployment is the bench Deployment, its pods spread evenly over
// the nodes.
var spreadDeployment = strings.Replace(deployment, "      terminationGracePeriodSeconds: 1\n", `      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: bench}}}
`, 1)

// nodesRound brings side up, measures (unless warmUp, which only runs
// through), and brings it down.
func (b *bench) nodesRound(ctx context.Context, s *nodesSide, warmUp bool) error {
	t0 := time.Now()
	if err := s.up(ctx); err != nil {
		return err
	}
	b.logf("%s up in %s", s.name, time.Since(t0).Round(time.Millisecond))
	rtt, tput, err := b.podToPod(ctx)
	if err != nil {
		return err
	}
	ready, _, _, err := b.round(ctx)
	if err != nil {
		return err
	}
	b.logf("%s%s: RTT p50 %.1f µs, %.2f Gbit/s, %d Ready in %s", s.name, map[bool]string{true: " (warm-up)"}[warmUp], rtt, tput, b.replicas, ready.Round(time.Millisecond))
	if !warmUp {
		s.rtt, s.tput, s.ready = append(s.rtt, rtt), append(s.tput, tput), append(s.ready, ready)
	}
	if b.policy {
		f, err := b.policyRound(ctx)
		if err != nil {
			return fmt.Errorf("NetworkPolicy: %w", err)
		}
		b.logf("%s%s: policy deny %s, allow %s, revoke %s; connect p50 %.0f → %.0f µs with 50 policies; %d Ready in %s → %s with 50",
			s.name, map[bool]string{true: " (warm-up)"}[warmUp], ms(f.deny), ms(f.allow), ms(f.revoke), f.connectNone, f.connect50,
			b.replicas, ms(f.readyOff), ms(f.readyOn))
		if !warmUp {
			s.policy.rounds = append(s.policy.rounds, f)
		}
	}
	return s.down(ctx)
}

// podToPod runs netbench between a server pod on the last node and a
// client pod on the first: the round trips' p50 (µs) and the throughput
// (Gbit/s).
func (b *bench) podToPod(ctx context.Context) (float64, float64, error) {
	c := b.c
	first, last := c.Nodes[0].Name, c.Nodes[len(c.Nodes)-1].Name
	doc := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: nb-server, namespace: default, labels: {app: netbench}}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers: [{name: s, image: %[3]s, command: ["/bin/netbench", "serve"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: nb-client, namespace: default, labels: {app: netbench}}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: %[3]s, command: ["/bin/sleep", "3600"]}]
`, last, first, k8stest.BusyboxImage)
	if err := b.apply(ctx, doc); err != nil {
		return 0, 0, err
	}
	defer func() {
		_, _ = c.Kubectl(ctx, "delete", "pod", "-l", "app=netbench", "--wait=true", "--timeout=2m")
	}()
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "pod", "-l", "app=netbench", "--timeout=3m"); err != nil {
		return 0, 0, err
	}
	var server struct {
		Status struct {
			PodIP string `json:"podIP"`
		} `json:"status"`
	}
	if err := c.KubectlJSON(ctx, &server, "get", "pod", "nb-server"); err != nil {
		return 0, 0, err
	}
	addr := server.Status.PodIP + ":5201"
	var rtt struct {
		P50 float64 `json:"p50_us"`
	}
	var tput struct {
		Gbps float64 `json:"gbps"`
	}
	// The server may not listen yet: its first answer is the sign.
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := c.Kubectl(ctx, "exec", "nb-client", "--", "netbench", "rtt", "-addr", addr, "-n", "2000")
		if err == nil {
			if err := json.Unmarshal([]byte(out), &rtt); err != nil {
				return 0, 0, fmt.Errorf("netbench rtt: %v: %s", err, out)
			}
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	out, err := c.Kubectl(ctx, "exec", "nb-client", "--", "netbench", "tput", "-addr", addr, "-seconds", "3")
	if err != nil {
		return 0, 0, err
	}
	if err := json.Unmarshal([]byte(out), &tput); err != nil {
		return 0, 0, fmt.Errorf("netbench tput: %v: %s", err, out)
	}
	return rtt.P50, tput.Gbps, nil
}

// waitNodesReady waits until every node's Ready condition is want.
func (b *bench) waitNodesReady(ctx context.Context, want bool) error {
	for _, n := range b.c.Nodes {
		if err := b.waitNodeReady(ctx, n.Name, want); err != nil {
			return err
		}
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func reportNodes(w io.Writer, nodes, replicas int, kurma, plain *nodesSide) {
	fmt.Fprintf(w, "\n## Kubernetes across %d nodes (flannel vxlan; kurma's flannel manifest vs the same flanneld and plugins on the nodes; rounds interleaved)\n\n", nodes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tkurma\tdirect\tratio\tgoal\tmet")
	row := func(metric string, k, p float64, unit string, ratio float64, goal string, met bool) {
		fmt.Fprintf(tw, "%s\t%.1f %s\t%.1f %s\t%.3f×\t%s\t%s\n", metric, k, unit, p, unit, ratio, goal, map[bool]string{true: "yes", false: "no"}[met])
	}
	kr, pr := median(kurma.rtt), median(plain.rtt)
	row(fmt.Sprintf("pod-to-pod TCP RTT p50, across nodes (median of %d rounds)", len(kurma.rtt)), kr, pr, "µs", kr/pr, "≤1.03×", kr/pr <= 1.03)
	kt, pt := median(kurma.tput), median(plain.tput)
	row(fmt.Sprintf("pod-to-pod TCP throughput, across nodes (median of %d rounds)", len(kurma.tput)), kt, pt, "Gbit/s", kt/pt, "≥0.97×", kt/pt >= 0.97)
	kd, pd := pct(kurma.ready, 50), pct(plain.ready, 50)
	r := float64(kd) / float64(max(pd, 1))
	fmt.Fprintf(tw, "Deployment 0→%d over %d nodes until all Ready (n=%d)\t%s\t%s\t%.3f×\t≤1.10×\t%s\n", replicas, nodes, len(kurma.ready), ms(kd), ms(pd), r, map[bool]string{true: "yes", false: "no"}[r <= 1.10])
	tw.Flush()
	fmt.Fprintf(w, "\nper round: kurma RTT %v µs, %v Gbit/s; direct RTT %v µs, %v Gbit/s\n", kurma.rtt, kurma.tput, plain.rtt, plain.tput)
}
