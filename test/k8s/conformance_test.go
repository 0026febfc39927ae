package k8stest

// TestConformance is `make k8s-conformance`: Kubernetes' own e2e network
// tests (test/k8s/conformance, built into out/e2e.test) run on an N-node
// dual-stack cluster with cluster DNS, first against the reference
// plugins run on the nodes directly (the baseline: flanneld and bridge +
// host-local, and kurma's policy daemon run directly), then against kurma
// as shipped (deploy/kubernetes/flannel/kurma-flannel.yaml). kurma must
// fail nothing, pass everything the baseline passes, and skip nothing the
// baseline runs. docs/runtimes.md, "make k8s-conformance".

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment of a conformance run.
const (
	// conformanceResultsEnv is the results directory (default
	// out/conformance): <dir>/<side>/ and <dir>/comparison.txt.
	conformanceResultsEnv = "KURMA_CONFORMANCE_RESULTS"
	// conformanceSidesEnv chooses the sides, "baseline,kurma" by default.
	conformanceSidesEnv = "KURMA_CONFORMANCE_SIDES"
	// conformanceProcsEnv is the number of ginkgo processes (default 4).
	conformanceProcsEnv = "KURMA_CONFORMANCE_PROCS"
	// conformanceFocusEnv replaces the focus (one regular expression),
	// to rerun a few specs.
	conformanceFocusEnv = "KURMA_CONFORMANCE_FOCUS"
)

func TestConformance(t *testing.T) {
	nodes, err := NodesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if nodes < 2 {
		t.Fatalf("%s=%d: the conformance run needs %s=2 or more (make k8s-conformance sets 2)", NodesEnv, nodes, NodesEnv)
	}
	root := repo(t)
	e2eTest := need(t, mustAbs(t, "out/e2e.test"), "make k8s-conformance builds it")
	ginkgo := need(t, mustAbs(t, "out/ginkgo"), "make k8s-conformance builds it")
	results := os.Getenv(conformanceResultsEnv)
	if results == "" {
		results = "out/conformance"
	}
	results = mustAbs(t, results)
	if err := os.RemoveAll(results); err != nil {
		t.Fatal(err)
	}
	sides := strings.Split(os.Getenv(conformanceSidesEnv), ",")
	if sides[0] == "" {
		sides = []string{"baseline", "kurma"}
	}
	procs := 4
	if s := os.Getenv(conformanceProcsEnv); s != "" {
		if procs, err = strconv.Atoi(s); err != nil || procs < 1 {
			t.Fatalf("%s=%q: want a number of processes", conformanceProcsEnv, s)
		}
	}
	focus := ConformanceFocus
	if f := os.Getenv(conformanceFocusEnv); f != "" {
		focus = []string{f}
	}
	s := &stepper{t: t, start: time.Now()}
	ctx := context.Background()

	s.step("building the e2e test images (agnhost, CoreDNS, ...)")
	moduleDir := mustAbs(t, ".")
	images, err := BuildE2EImages(ctx, moduleDir, mustAbs(t, "out/e2e-images"), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	c := startNodes(t, Options{Nodes: nodes, DualStack: true, ClusterDNS: true, Archives: []string{images}})
	run := func(side string) []SpecResult {
		s.step("%s: the e2e suite", side)
		if err := DeployCoreDNS(ctx, c); err != nil {
			t.Fatalf("%s: cluster DNS: %v", side, err)
		}
		res, err := E2ERun{E2ETest: e2eTest, Ginkgo: ginkgo, Dir: filepath.Join(results, side), Procs: procs,
			Focus: focus, Skips: ConformanceSkips, Timeout: 150 * time.Minute, Logf: t.Logf}.Run(ctx, c)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		t.Logf("%s: %s (%s)", side, Summarize(res), filepath.Join(results, side))
		if err := DeleteCoreDNS(ctx, c); err != nil {
			t.Fatalf("%s: removing cluster DNS: %v", side, err)
		}
		if err := waitE2ENamespacesGone(ctx, c); err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		return res
	}

	byside := map[string][]SpecResult{}
	for _, side := range sides {
		switch side {
		case "baseline":
			s.step("baseline: flanneld, the reference CNI plugins and the policy daemon on the nodes directly")
			direct := directFlannel(t, c)
			if err := direct.Start(ctx, c); err != nil {
				t.Fatal(err)
			}
			waitNodesReady(t, c)
			// A focus of KURMA_CONFORMANCE_FOCUS that names no policy
			// test runs without the policy daemon.
			policy := NewDirectNetpol(root)
			withPolicy := strings.Contains(strings.Join(focus, " "), "NetworkPolicy")
			if withPolicy {
				if err := policy.Start(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			byside[side] = run(side)
			if withPolicy {
				if err := policy.Stop(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			if err := direct.Stop(ctx, c); err != nil {
				t.Fatal(err)
			}
		case "kurma":
			manifest := filepath.Join(root, "deploy/kubernetes/flannel/kurma-flannel.yaml")
			s.step("kurma: kubectl apply -f %s (as shipped)", manifest)
			if _, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=5m"); err != nil {
				t.Fatal(err)
			}
			waitNodesReady(t, c)
			byside[side] = run(side)
		default:
			t.Fatalf("%s: unknown side %q (baseline, kurma)", conformanceSidesEnv, side)
		}
	}

	judgeSides(t, results, byside["baseline"], byside["kurma"], true)
}

// judgeSides writes <results>/comparison.txt and fails the test where
// kurma passes less than the baseline or skips what it runs; with
// mustPass, also where kurma fails anything at all (Kubernetes' suite:
// the baseline passes it all), else kurma's failures are only logged.
func judgeSides(t *testing.T, results string, base, kurma []SpecResult, mustPass bool) {
	t.Helper()
	if kurma == nil {
		return
	}
	cmp := Compare(base, kurma)
	if err := os.WriteFile(filepath.Join(results, "comparison.txt"), []byte(cmp.Table), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline: %s; kurma: %s; side by side: %s", Summarize(base), Summarize(kurma), filepath.Join(results, "comparison.txt"))
	for _, n := range cmp.Failures {
		if mustPass {
			t.Errorf("kurma fails: %s", n)
		} else {
			t.Logf("kurma fails: %s", n)
		}
	}
	if base == nil {
		return
	}
	for _, n := range cmp.Regressions {
		t.Errorf("the baseline passes and kurma does not: %s", n)
	}
	for _, n := range cmp.ExtraSkips {
		t.Errorf("kurma skips what the baseline runs: %s", n)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// waitE2ENamespacesGone waits until the namespaces the e2e suite made
// are gone (their pods' sandboxes torn down through the side that made
// them), so that the next side starts from a clean cluster.
func waitE2ENamespacesGone(ctx context.Context, c *Cluster) error {
	return c.waitFor(ctx, 15*time.Minute, "the e2e suite's namespaces to be gone", "", func() error {
		out, err := c.Kubectl(ctx, "get", "namespaces", "-o", "name")
		if err != nil {
			return err
		}
		var left []string
		for _, ns := range strings.Fields(out) {
			name := strings.TrimPrefix(ns, "namespace/")
			switch name {
			case "default", "kube-system", "kube-public", "kube-node-lease", "kurma-system":
				continue
			}
			left = append(left, name)
		}
		if len(left) > 0 {
			return fmt.Errorf("%d left: %s", len(left), strings.Join(left, " "))
		}
		return nil
	})
}
