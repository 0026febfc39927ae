package k8stest

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"
)

// network-policy-api's conformance suite, for AdminNetworkPolicy and
// BaselineAdminNetworkPolicy (`make k8s-anp-conformance`): its test
// binary is built from the module proxy (`make k8s-anp-e2e`, never
// copied here) and run against a cluster with the release's CRDs.
const (
	// NetworkPolicyAPIModule holds the suite (conformance/) and the CRDs
	// (config/crd/).
	NetworkPolicyAPIModule = "sigs.k8s.io/network-policy-api"
	// NetworkPolicyAPIVersion is the last release whose suite tests the
	// policy.networking.k8s.io/v1alpha1 APIs kube-network-policies v0.8.0
	// implements; v0.3.0's tests ClusterNetworkPolicy (v1alpha2), which it
	// does not.
	NetworkPolicyAPIVersion = "v0.1.7"
	// ANPCRDChannel is the CRDs' channel installed: experimental, a
	// superset of standard with the named ports and node peers the
	// library implements (kube-network-policies' own CI installs it).
	ANPCRDChannel = "experimental"
)

// ANPFeatures are the suite's features claimed (-supported-features):
// every feature of v0.1.7, standard and experimental.
var ANPFeatures = []string{
	"AdminNetworkPolicy", "BaselineAdminNetworkPolicy",
	"AdminNetworkPolicyNamedPorts", "AdminNetworkPolicyEgressNodePeers",
	"BaselineAdminNetworkPolicyNamedPorts", "BaselineAdminNetworkPolicyEgressNodePeers",
}

// noSCTP is why SCTP is left out of every ANP run on this machine.
const noSCTP = "the kernel has no SCTP (CONFIG_IP_SCTP is not set): no SCTP socket can be made, on any side"

// ANPSkips are the suite's tests (by their names below TestConformance)
// left out on both sides, with their reasons: those that test SCTP
// alone.
var ANPSkips = []Skip{
	{"AdminNetworkPolicyEgressSCTP", noSCTP},
	{"AdminNetworkPolicyIngressSCTP", noSCTP},
	{"BaselineAdminNetworkPolicyEgressSCTP", noSCTP},
	{"BaselineAdminNetworkPolicyIngressSCTP", noSCTP},
}

// anpSCTPEnvPrefix marks the suite's SCTP servers in its base pods:
// agnhost porter serves SCTP on the port named by such a variable, and
// exits when it cannot (log.Fatal), so that the pod is never ready.
const anpSCTPEnvPrefix = "SERVE_SCTP_PORT_"

// anpNamespacePrefix starts the name of every namespace the suite makes.
const anpNamespacePrefix = "network-policy-conformance-"

// NetworkPolicyAPIDir is the directory of network-policy-api at
// NetworkPolicyAPIVersion in the module cache, downloaded from the
// module proxy when missing.
func NetworkPolicyAPIDir(ctx context.Context) (string, error) {
	mod := NetworkPolicyAPIModule + "@" + NetworkPolicyAPIVersion
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	// Outside any module: the version is the one named, not a go.mod's.
	// From the module cache alone: a test's namespaces may have no route
	// to the proxy (make k8s-anp-e2e downloads it).
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s (make k8s-anp-e2e downloads it): %v: %s", mod, err, out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no directory (%s)", mod, info.Error)
	}
	return info.Dir, nil
}

// InstallANPCRDs applies the AdminNetworkPolicy and
// BaselineAdminNetworkPolicy CRDs of network-policy-api (its directory
// dir, channel ANPCRDChannel) and waits until both are established.
func InstallANPCRDs(ctx context.Context, c *Cluster, dir string) error {
	crdDir := filepath.Join(dir, "config", "crd", ANPCRDChannel)
	for _, f := range []string{"policy.networking.k8s.io_adminnetworkpolicies.yaml", "policy.networking.k8s.io_baselineadminnetworkpolicies.yaml"} {
		if _, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(crdDir, f)); err != nil {
			return fmt.Errorf("the CRD %s: %w", filepath.Join(crdDir, f), err)
		}
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m",
		"crd/adminnetworkpolicies.policy.networking.k8s.io", "crd/baselineadminnetworkpolicies.policy.networking.k8s.io"); err != nil {
		return fmt.Errorf("the ANP CRDs: %w", err)
	}
	return nil
}

// DeleteAdminNetworkPolicies deletes every AdminNetworkPolicy and
// BaselineAdminNetworkPolicy, so that none a run left behind acts on the
// next.
func DeleteAdminNetworkPolicies(ctx context.Context, c *Cluster) error {
	for _, r := range []string{"adminnetworkpolicies.policy.networking.k8s.io", "baselineadminnetworkpolicies.policy.networking.k8s.io"} {
		if _, err := c.Kubectl(ctx, "delete", r, "--all", "--wait=true", "--timeout=2m"); err != nil {
			return fmt.Errorf("deleting every %s: %w", r, err)
		}
	}
	return nil
}

// WithAdminNetworkPolicy is the manifest at path (deploy/kubernetes/...,
// YAML documents) as a kubectl List in JSON, unchanged but for kurmad's
// config (the ConfigMap kurmad-config, key kurmad.json): its network of
// role "policy" gets "admin_network_policy" and
// "baseline_admin_network_policy" true. It fails when the manifest has no
// such ConfigMap or network.
func WithAdminNetworkPolicy(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var items []map[string]any
	changed := 0
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if obj == nil {
			continue
		}
		if obj["kind"] == "ConfigMap" && nestedString(obj, "metadata", "name") == "kurmad-config" {
			data, _ := obj["data"].(map[string]any)
			conf, _ := data["kurmad.json"].(string)
			if conf == "" {
				return nil, fmt.Errorf("%s: the ConfigMap kurmad-config has no kurmad.json", path)
			}
			out, n, err := policyWithANP(conf)
			if err != nil {
				return nil, fmt.Errorf("%s: ConfigMap kurmad-config, kurmad.json: %w", path, err)
			}
			data["kurmad.json"] = out
			changed += n
		}
		items = append(items, obj)
	}
	if changed != 1 {
		return nil, fmt.Errorf("%s: %d networks of role \"policy\" in the ConfigMap kurmad-config, want 1", path, changed)
	}
	return json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
}

// policyWithANP turns on the ANP keys of the policy networks of a
// kurmad.json and says how many it changed.
func policyWithANP(conf string) (string, int, error) {
	var cfg map[string]any
	if err := json.Unmarshal([]byte(conf), &cfg); err != nil {
		return "", 0, err
	}
	nets, _ := cfg["pod_networks"].([]any)
	n := 0
	for _, e := range nets {
		net, _ := e.(map[string]any)
		if net == nil || net["role"] != "policy" {
			continue
		}
		net["admin_network_policy"] = true
		net["baseline_admin_network_policy"] = true
		n++
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	return string(out) + "\n", n, err
}

func nestedString(obj map[string]any, keys ...string) string {
	var cur any = obj
	for _, k := range keys {
		m, _ := cur.(map[string]any)
		if m == nil {
			return ""
		}
		cur = m[k]
	}
	s, _ := cur.(string)
	return s
}

// ANPRun is one run of network-policy-api's conformance suite against a
// cluster.
type ANPRun struct {
	// Binary is the suite's test binary (conformance/, built with go
	// test -c: make k8s-anp-e2e).
	Binary string
	// Dir receives the events of the run (anp.json, test2json's), its
	// output (anp.log), junit.xml, the summary and the lists of failed
	// and skipped tests, and the changes made to the suite's pods.
	Dir string
	// Features are claimed (-supported-features); Skips are left out.
	Features []string
	Skips    []Skip
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Logf reports progress.
	Logf func(string, ...any)
}

// Run runs the suite's TestConformance against c and returns its tests
// (the leaves: a test with subtests counts as those), the skipped ones
// included. A test's failure is not an error; a suite that left no
// events is.
//
// The suite's base pods each carry two agnhost porter containers serving
// SCTP, which exit on a kernel without SCTP, so that no base pod is ever
// ready and the suite fails its setup: while it runs, those containers
// are removed from its StatefulSets as they appear, and their first pods
// deleted (recorded in adjusted.txt). The tests that probe SCTP still
// do, and fail at it.
func (r ANPRun) Run(ctx context.Context, c *Cluster) ([]SpecResult, error) {
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return nil, err
	}
	events := filepath.Join(r.Dir, "anp.json")
	ev, err := os.Create(events)
	if err != nil {
		return nil, err
	}
	defer ev.Close()
	stderr, err := os.Create(filepath.Join(r.Dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	skipNames := make([]string, len(r.Skips))
	for i, s := range r.Skips {
		skipNames[i] = s.Pattern
	}
	args := []string{"tool", "test2json", "-t", "-p", "conformance", r.Binary, "-test.v=test2json",
		"-test.run=^TestConformance$", "-test.timeout=" + r.Timeout.String(),
		"-supported-features=" + strings.Join(r.Features, ","), "-cleanup-base-resources=true"}
	if len(skipNames) > 0 {
		args = append(args, "-test.skip=^TestConformance$/^("+strings.Join(skipNames, "|")+")$")
	}
	runCtx, cancel := context.WithTimeout(ctx, r.Timeout+5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, "go", args...)
	cmd.Dir = r.Dir
	cmd.Stdout, cmd.Stderr = ev, stderr
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)

	adjCtx, stopAdj := context.WithCancel(runCtx)
	var adjusted []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		adjusted = dropSCTPServers(adjCtx, c, r.Logf)
	}()
	start := time.Now()
	r.Logf("running network-policy-api %s's conformance suite: %s", NetworkPolicyAPIVersion, strings.Join(cmd.Args, " "))
	runErr := cmd.Run()
	stopAdj()
	wg.Wait()
	r.Logf("the suite ended after %s (%v); its events: %s", time.Since(start).Round(time.Second), runErr, events)
	if err := os.WriteFile(filepath.Join(r.Dir, "adjusted.txt"), []byte(strings.Join(adjusted, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	results, log, err := readTestEvents(events)
	if err != nil {
		return nil, fmt.Errorf("the suite left no events (%v): %w; its stderr: %s", runErr, err, stderr.Name())
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "anp.log"), []byte(log), 0o644); err != nil {
		return nil, err
	}
	for _, s := range r.Skips {
		results = append(results, SpecResult{Name: s.Pattern, State: "skipped", Message: "left out: " + s.Reason})
	}
	sort.Slice(results, func(i, j int) bool { return results[i].Name < results[j].Name })
	if err := writeJUnit(filepath.Join(r.Dir, "junit.xml"), "network-policy-api "+NetworkPolicyAPIVersion+" conformance", results); err != nil {
		return results, err
	}
	if err := writeRunFiles(r.Dir, results, nil); err != nil {
		return results, err
	}
	var list strings.Builder
	for _, s := range r.Skips {
		fmt.Fprintf(&list, "-test.skip TestConformance/%s\n    %s\n", s.Pattern, s.Reason)
	}
	return results, os.WriteFile(filepath.Join(r.Dir, "skips.txt"), []byte(list.String()), 0o644)
}

// dropSCTPServers removes the SCTP server containers (anpSCTPEnvPrefix)
// from the suite's StatefulSets as they appear, and deletes their pods so
// that they are made again without them (a StatefulSet's rolling update
// waits for a ready pod that never comes). The suite applies its base
// manifests once, at its start: it stops once it changed some and then
// finds none left to change, or when ctx ends. A failed kubectl call is
// retried at the next poll (logged); it returns what it changed.
func dropSCTPServers(ctx context.Context, c *Cluster, logf func(string, ...any)) []string {
	var done []string
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		changed, err := dropSCTPServersOnce(ctx, c)
		for _, line := range changed {
			logf("%s", line)
		}
		done = append(done, changed...)
		switch {
		case ctx.Err() != nil:
			return done
		case err != nil:
			logf("removing the suite's SCTP servers (retried): %v", err)
		case len(done) > 0 && len(changed) == 0:
			return done
		}
		select {
		case <-ctx.Done():
			return done
		case <-tick.C:
		}
	}
}

// dropSCTPServersOnce is one poll of dropSCTPServers.
func dropSCTPServersOnce(ctx context.Context, c *Cluster) ([]string, error) {
	var list struct {
		Items []struct {
			Metadata struct{ Name, Namespace string }
			Spec     struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				}
				Template struct {
					Spec struct {
						Containers []struct {
							Name string
							Env  []struct{ Name string }
						}
					}
				}
			}
		}
	}
	if err := c.KubectlJSON(ctx, &list, "get", "statefulsets", "--all-namespaces"); err != nil {
		return nil, err
	}
	var done []string
	for _, s := range list.Items {
		if !strings.HasPrefix(s.Metadata.Namespace, anpNamespacePrefix) {
			continue
		}
		var drop []int
		var names []string
		for i, ct := range s.Spec.Template.Spec.Containers {
			for _, e := range ct.Env {
				if strings.HasPrefix(e.Name, anpSCTPEnvPrefix) {
					drop = append(drop, i)
					names = append(names, ct.Name)
					break
				}
			}
		}
		if len(drop) == 0 {
			continue
		}
		// JSON patch removes one at a time: the highest index first,
		// each after a test of its name.
		var ops []string
		for i := len(drop) - 1; i >= 0; i-- {
			ops = append(ops, fmt.Sprintf(`{"op":"test","path":"/spec/template/spec/containers/%d/name","value":%q},{"op":"remove","path":"/spec/template/spec/containers/%d"}`, drop[i], names[i], drop[i]))
		}
		ref := s.Metadata.Namespace + "/statefulset/" + s.Metadata.Name
		if _, err := c.Kubectl(ctx, "-n", s.Metadata.Namespace, "patch", "statefulset", s.Metadata.Name, "--type=json", "-p", "["+strings.Join(ops, ",")+"]"); err != nil {
			return done, fmt.Errorf("%s: %w", ref, err)
		}
		var sel []string
		for k, v := range s.Spec.Selector.MatchLabels {
			sel = append(sel, k+"="+v)
		}
		sort.Strings(sel)
		if _, err := c.Kubectl(ctx, "-n", s.Metadata.Namespace, "delete", "pods", "-l", strings.Join(sel, ","), "--wait=false"); err != nil {
			return done, fmt.Errorf("%s: deleting its pods: %w", ref, err)
		}
		done = append(done, fmt.Sprintf("%s: removed the SCTP server containers %s (%s)", ref, strings.Join(names, ", "), noSCTP))
	}
	return done, nil
}

// testEvent is one line of test2json's output.
type testEvent struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// readTestEvents reads test2json's events: the leaf tests with their
// states (a test that started and never ended failed), and the run's
// whole output.
func readTestEvents(path string) ([]SpecResult, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	type test struct {
		state   string
		elapsed float64
		output  []string
	}
	tests := map[string]*test{}
	var order []string
	var log strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for sc.Scan() {
		var e testEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // the binary's own lines, if any
		}
		n++
		if e.Action == "output" {
			log.WriteString(e.Output)
		}
		if e.Test == "" {
			continue
		}
		t := tests[e.Test]
		if t == nil {
			t = &test{}
			tests[e.Test] = t
			order = append(order, e.Test)
		}
		switch e.Action {
		case "output":
			t.output = append(t.output, strings.TrimRight(e.Output, "\n"))
		case "pass":
			t.state, t.elapsed = "passed", e.Elapsed
		case "fail":
			t.state, t.elapsed = "failed", e.Elapsed
		case "skip":
			t.state, t.elapsed = "skipped", e.Elapsed
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if n == 0 {
		return nil, "", fmt.Errorf("%s: no test2json events", path)
	}
	var out []SpecResult
	for _, name := range order {
		parent := false
		for _, o := range order {
			if strings.HasPrefix(o, name+"/") {
				parent = true
				break
			}
		}
		if parent {
			continue
		}
		t := tests[name]
		r := SpecResult{Name: strings.TrimPrefix(name, "TestConformance/"), State: t.state,
			Time: time.Duration(t.elapsed * float64(time.Second))}
		switch t.state {
		case "":
			r.State, r.Message = "failed", "did not end (the suite timed out or stopped): "+lastLines(t.output, 3)
		case "failed":
			r.Message = failureMessage(t.output)
		case "skipped":
			r.Message = skipMessage(t.output)
		}
		out = append(out, r)
	}
	return out, log.String(), nil
}

// failureMessage is what a failed test's output says of its failure:
// the probes that failed and the assertions' errors. When every probe
// that failed was an SCTP one, it says so first.
func failureMessage(lines []string) string {
	var keep []string
	probes, sctp := 0, 0
	for _, l := range lines {
		s := strings.TrimSpace(l)
		switch {
		case strings.Contains(s, "FAILED Command was"):
			probes++
			if strings.Contains(s, "--protocol=sctp") {
				sctp++
			}
			keep = append(keep, s)
		case strings.Contains(s, "Expected connection"), strings.Contains(s, "Error:"), strings.Contains(s, "Messages:"),
			strings.Contains(s, "panic:"), strings.Contains(s, "test timed out"):
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return lastLines(lines, 5)
	}
	msg := strings.Join(keep, " | ")
	if probes > 0 && probes == sctp {
		msg = "every probe that failed is SCTP (" + noSCTP + "): " + msg
	}
	return msg
}

// skipMessage is the reason a skipped test gives.
func skipMessage(lines []string) string {
	for _, l := range lines {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- ") {
			continue
		}
		return s
	}
	return ""
}

func lastLines(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, " | "))
}

// junitReport is the JUnit XML written for a go test run, in the form
// ReadJUnit reads.
type junitReport struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name    string        `xml:"name,attr"`
	Status  string        `xml:"status,attr"`
	Time    float64       `xml:"time,attr"`
	Skipped *junitMessage `xml:"skipped"`
	Failure *junitMessage `xml:"failure"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
}

// writeJUnit writes results as one JUnit test suite.
func writeJUnit(path, suite string, results []SpecResult) error {
	sum := Summarize(results)
	js := junitSuite{Name: suite, Tests: len(results), Failures: sum.Failed, Skipped: sum.Skipped}
	for _, r := range results {
		jc := junitCase{Name: r.Name, Status: r.State, Time: r.Time.Seconds()}
		switch r.State {
		case "failed":
			jc.Failure = &junitMessage{r.Message}
		case "skipped":
			jc.Skipped = &junitMessage{r.Message}
		}
		js.Cases = append(js.Cases, jc)
	}
	b, err := xml.MarshalIndent(junitReport{Suites: []junitSuite{js}}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}
