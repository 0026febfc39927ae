package k8stest

// TestAdminNetworkPolicyConformance is `make k8s-anp-conformance`:
// network-policy-api's own conformance suite for AdminNetworkPolicy and
// BaselineAdminNetworkPolicy (v0.1.7, built into out/anp-conformance.test
// by make k8s-anp-e2e) on an N-node dual-stack cluster with the release's
// CRDs, first against the baseline (flanneld and the reference plugins on
// the nodes, kurma's policy daemon run directly with both APIs on), then
// against kurma's flannel manifest with its policy network's
// admin_network_policy and baseline_admin_network_policy on. kurma must
// pass everything the baseline passes and skip nothing it runs.
// docs/runtimes.md, "make k8s-anp-conformance".

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Environment of an ANP conformance run.
const (
	// anpResultsEnv is the results directory (default
	// out/anp-conformance): <dir>/<side>/ and <dir>/comparison.txt.
	anpResultsEnv = "KURMA_ANP_RESULTS"
	// anpSidesEnv chooses the sides, "baseline,kurma" by default.
	anpSidesEnv = "KURMA_ANP_SIDES"
)

func TestAdminNetworkPolicyConformance(t *testing.T) {
	nodes, err := NodesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	// The suite's host-network StatefulSet (centaur) runs two replicas
	// on the same host ports: one per node.
	if nodes < 2 {
		t.Fatalf("%s=%d: the ANP conformance run needs %s=2 or more (make k8s-anp-conformance sets 2)", NodesEnv, nodes, NodesEnv)
	}
	root := repo(t)
	kurmactl := need(t, filepath.Join(root, "images/out/kurma-bin/kurmactl"), "run make image first")
	suite := need(t, mustAbs(t, "out/anp-conformance.test"), "make k8s-anp-conformance builds it")
	results := os.Getenv(anpResultsEnv)
	if results == "" {
		results = "out/anp-conformance"
	}
	results = mustAbs(t, results)
	if err := os.RemoveAll(results); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	sides := strings.Split(os.Getenv(anpSidesEnv), ",")
	if sides[0] == "" {
		sides = []string{"baseline", "kurma"}
	}
	for _, side := range sides {
		if side != "baseline" && side != "kurma" {
			t.Fatalf("%s: unknown side %q (baseline, kurma)", anpSidesEnv, side)
		}
	}
	s := &stepper{t: t, start: time.Now()}
	ctx := context.Background()

	npapi, err := NetworkPolicyAPIDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// kurma's manifest with its policy network's ANP keys on: checked
	// before any cluster is made, kept with the results.
	manifest := filepath.Join(root, "deploy/kubernetes/flannel/kurma-flannel.yaml")
	anpManifest, err := WithAdminNetworkPolicy(manifest)
	if err != nil {
		t.Fatal(err)
	}
	anpManifestPath := filepath.Join(results, "kurma-flannel-anp.json")
	if err := os.WriteFile(anpManifestPath, anpManifest, 0o644); err != nil {
		t.Fatal(err)
	}

	s.step("building the e2e test images (agnhost, also as %s)", AgnhostANPImage)
	images, err := BuildE2EImages(ctx, mustAbs(t, "."), mustAbs(t, "out/e2e-images"), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	c := startNodes(t, Options{Nodes: nodes, DualStack: true, Archives: []string{images}})
	s.step("the AdminNetworkPolicy and BaselineAdminNetworkPolicy CRDs of %s %s (%s channel)", NetworkPolicyAPIModule, NetworkPolicyAPIVersion, ANPCRDChannel)
	if err := InstallANPCRDs(ctx, c, npapi); err != nil {
		t.Fatal(err)
	}

	run := func(side string) []SpecResult {
		s.step("%s: the suite (%s)", side, strings.Join(ANPFeatures, ","))
		res, err := ANPRun{Binary: suite, Dir: filepath.Join(results, side), Features: ANPFeatures, Skips: ANPSkips,
			Timeout: 90 * time.Minute, Logf: t.Logf}.Run(ctx, c)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		t.Logf("%s: %s (%s)", side, Summarize(res), filepath.Join(results, side))
		if err := DeleteAdminNetworkPolicies(ctx, c); err != nil {
			t.Fatalf("%s: %v", side, err)
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
			s.step("baseline: flanneld, the reference CNI plugins and the policy daemon (ANP and BANP on) on the nodes directly")
			direct := directFlannel(t, c)
			if err := direct.Start(ctx, c); err != nil {
				t.Fatal(err)
			}
			waitNodesReady(t, c)
			policy := NewDirectNetpol(root)
			policy.AdminNetworkPolicy, policy.BaselineAdminNetworkPolicy = true, true
			if err := policy.Start(ctx, c); err != nil {
				t.Fatal(err)
			}
			byside[side] = run(side)
			if err := policy.Stop(ctx, c); err != nil {
				t.Fatal(err)
			}
			if err := direct.Stop(ctx, c); err != nil {
				t.Fatal(err)
			}
		case "kurma":
			s.step("kurma: kubectl apply -f %s (%s with the policy network's ANP keys on)", anpManifestPath, manifest)
			if _, err := c.Kubectl(ctx, "apply", "-f", anpManifestPath); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=5m"); err != nil {
				t.Fatal(err)
			}
			waitNodesReady(t, c)
			// The policy network runs (its status verb: the daemon
			// enforces) on every node before the suite's first pod:
			// nodes are network-ready whatever netpol does.
			for _, n := range c.Nodes {
				waitFor(t, 3*time.Minute, "kurma's policy network to run on "+n.Name, func() error {
					for _, g := range kurmadGensAt(t, kurmactl, n.Path(kurmadSocket)) {
						if g.Network == "netpol" && g.State == "running" {
							return nil
						}
					}
					return fmt.Errorf("netpol is not running")
				})
			}
			byside[side] = run(side)
		}
	}

	base, kurma := byside["baseline"], byside["kurma"]
	if kurma == nil {
		return
	}
	cmp := Compare(base, kurma)
	if err := os.WriteFile(filepath.Join(results, "comparison.txt"), []byte(cmp.Table), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline: %s; kurma: %s; side by side: %s", Summarize(base), Summarize(kurma), filepath.Join(results, "comparison.txt"))
	for _, n := range cmp.Failures {
		t.Logf("kurma fails: %s", n)
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

// TestWithAdminNetworkPolicy: the shipped flannel manifest, as the kurma
// side applies it, differs only in its policy network's two ANP keys.
func TestWithAdminNetworkPolicy(t *testing.T) {
	path := filepath.Join(repo(t), "deploy/kubernetes/flannel/kurma-flannel.yaml")
	b, err := WithAdminNetworkPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []map[string]any }
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if docs := strings.Count("\n"+string(orig), "\n---\n") + 1; len(list.Items) != docs {
		t.Errorf("%d objects, want the manifest's %d", len(list.Items), docs)
	}
	var conf string
	for _, o := range list.Items {
		if o["kind"] == "ConfigMap" && nestedString(o, "metadata", "name") == "kurmad-config" {
			conf = nestedString(o, "data", "kurmad.json")
		}
	}
	var cfg struct {
		PodNetworks []map[string]any `json:"pod_networks"`
	}
	if err := json.Unmarshal([]byte(conf), &cfg); err != nil {
		t.Fatalf("kurmad.json: %v", err)
	}
	for _, n := range cfg.PodNetworks {
		policy := n["role"] == "policy"
		for _, k := range []string{"admin_network_policy", "baseline_admin_network_policy"} {
			if got := n[k] == true; got != policy {
				t.Errorf("network %v: %s is %v, want %v", n["name"], k, n[k], policy)
			}
		}
		if policy && (n["name"] != "netpol" || n["cluster_network"] != "podnet" || n["kubernetes_credentials"] != true) {
			t.Errorf("the policy network changed beyond its ANP keys: %v", n)
		}
	}
}

// TestReadTestEvents: a real go test binary's events, through test2json
// as the suite's are, give its leaf tests with their states.
func TestReadTestEvents(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.test/events\n\ngo 1.26\n",
		"x_test.go": `package events

import "testing"

func TestConformance(t *testing.T) {
	t.Run("A", func(t *testing.T) {
		t.Run("passes", func(t *testing.T) {})
		t.Run("fails", func(t *testing.T) {
			t.Log("FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.0.0.1:9003]")
			t.Error("Error: Should be true")
		})
	})
	t.Run("B", func(t *testing.T) { t.Skip("Skipping B: suite does not support Feature") })
}
`,
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "test", "-c", "-o", "x.test", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	run := exec.Command("go", "tool", "test2json", "-t", "-p", "x", "./x.test", "-test.v=test2json")
	run.Dir = dir
	out, _ := run.Output() // the binary fails: one test does
	events := filepath.Join(dir, "events.json")
	if err := os.WriteFile(events, out, 0o644); err != nil {
		t.Fatal(err)
	}
	res, _, err := readTestEvents(events)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SpecResult{}
	for _, r := range res {
		got[r.Name] = r
	}
	want := map[string]string{"A/passes": "passed", "A/fails": "failed", "B": "skipped"}
	if len(got) != len(want) {
		t.Errorf("results %v, want %v", res, want)
	}
	for n, st := range want {
		if got[n].State != st {
			t.Errorf("%s: %q, want %q (%v)", n, got[n].State, st, res)
		}
	}
	if m := got["A/fails"].Message; !strings.HasPrefix(m, "every probe that failed is SCTP") || !strings.Contains(m, "Error: Should be true") {
		t.Errorf("A/fails: message %q", m)
	}
	if m := got["B"].Message; !strings.Contains(m, "suite does not support Feature") {
		t.Errorf("B: message %q", m)
	}
}
