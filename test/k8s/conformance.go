package k8stest

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The specs `make k8s-conformance` runs from Kubernetes' own e2e suite:
// every sig-network test tagged [Conformance], every NetworkPolicy test
// (the netpol truth tables included) and the dual-stack tests.
var ConformanceFocus = []string{
	`\[sig-network\].*\[Conformance\]`,
	`\[Feature:NetworkPolicy\]`,
	`\[Feature:IPv6DualStack\]`,
}

// Skip is a kind of spec a conformance run leaves out, and why.
type Skip struct {
	Pattern string // a ginkgo --skip regular expression
	Reason  string
}

// ConformanceSkips are the specs of the focus that cannot run on this
// machine's clusters, whatever the network: each is left out on both
// sides, and listed with its reason in the results.
var ConformanceSkips = []Skip{
	{`\[Feature:SCTPConnectivity\]`, "the kernel has no SCTP (CONFIG_IP_SCTP is not set): no SCTP socket can be made, on any side"},
}

// SpecResult is one spec of a run, as its JUnit report has it.
type SpecResult struct {
	Name    string
	State   string // passed, failed, skipped
	Message string // a failure's or a skip's message
	Time    time.Duration
}

// RunSummary counts a run's specs.
type RunSummary struct {
	Passed, Failed, Skipped int
}

func (s RunSummary) String() string {
	return fmt.Sprintf("%d passed / %d failed / %d skipped", s.Passed, s.Failed, s.Skipped)
}

// Summarize counts results.
func Summarize(rs []SpecResult) RunSummary {
	var s RunSummary
	for _, r := range rs {
		switch r.State {
		case "passed":
			s.Passed++
		case "failed":
			s.Failed++
		default:
			s.Skipped++
		}
	}
	return s
}

// E2ERun is one run of the e2e suite against a cluster.
type E2ERun struct {
	// E2ETest and Ginkgo are the suite's binary (test/k8s/conformance
	// built with go test -c) and the ginkgo CLI of the same version.
	E2ETest, Ginkgo string
	// Dir receives the JUnit report (junit.xml), the suite's output
	// (e2e.log), the skips and the summary line.
	Dir string
	// Procs is the number of ginkgo processes.
	Procs int
	// Focus and Skips select the specs.
	Focus []string
	Skips []Skip
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Logf reports progress.
	Logf func(string, ...any)
}

// Run runs the suite against c and returns its specs: those the focus
// selects (a spec the skips leave out is skipped, with the skip's
// reason). A spec's failure is not an error; a suite that did not run
// (no report) is.
func (r E2ERun) Run(ctx context.Context, c *Cluster) ([]SpecResult, error) {
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return nil, err
	}
	junit := filepath.Join(r.Dir, "junit.xml")
	os.Remove(junit)
	args := []string{"--procs=" + strconv.Itoa(max(r.Procs, 1)), "--timeout=" + r.Timeout.String(),
		"--no-color", "--silence-skips", "--junit-report=junit.xml", "--output-dir=" + r.Dir}
	for _, f := range r.Focus {
		args = append(args, "--focus="+f)
	}
	for _, s := range r.Skips {
		args = append(args, "--skip="+s.Pattern)
	}
	args = append(args, r.E2ETest, "--",
		"--kubeconfig="+c.Kubeconfig, "--provider=skeleton", "--num-nodes="+strconv.Itoa(len(c.Nodes)),
		"--allowed-not-ready-nodes=0", "--dump-logs-on-failure=false", "--disable-log-dump",
		"--node-os-distro=debian", "--dns-domain="+ClusterDomain,
		"--report-dir="+r.Dir)
	log, err := os.Create(filepath.Join(r.Dir, "e2e.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(ctx, r.Timeout+5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Ginkgo, args...)
	cmd.Dir = r.Dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	start := time.Now()
	r.Logf("running the e2e suite (%d processes): %s", r.Procs, strings.Join(cmd.Args, " "))
	runErr := cmd.Run()
	r.Logf("the e2e suite ended after %s (%v); its output: %s", time.Since(start).Round(time.Second), runErr, log.Name())
	results, err := ReadJUnit(junit)
	if err != nil {
		return nil, fmt.Errorf("the e2e suite left no report (%v): %w; its output: %s", runErr, err, log.Name())
	}
	results = r.selected(results)
	if err := writeRunFiles(r.Dir, results, r.Skips); err != nil {
		return results, err
	}
	return results, nil
}

// selected keeps the specs the focus selects, and gives those a skip
// left out that skip's reason.
func (r E2ERun) selected(all []SpecResult) []SpecResult {
	focus := make([]*regexp.Regexp, len(r.Focus))
	for i, f := range r.Focus {
		focus[i] = regexp.MustCompile(f)
	}
	var out []SpecResult
	for _, s := range all {
		if !matchAny(focus, s.Name) {
			continue
		}
		if s.State == "skipped" {
			for _, sk := range r.Skips {
				if regexp.MustCompile(sk.Pattern).MatchString(s.Name) {
					s.Message = "left out: " + sk.Reason
					break
				}
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func matchAny(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// writeRunFiles writes a run's summary line (summary.txt), its skipped
// specs with their reasons (skipped.txt) and its failures (failed.txt).
func writeRunFiles(dir string, results []SpecResult, skips []Skip) error {
	var skipped, failed strings.Builder
	for _, s := range results {
		switch s.State {
		case "skipped":
			fmt.Fprintf(&skipped, "%s\n    %s\n", s.Name, firstLine(s.Message))
		case "failed":
			fmt.Fprintf(&failed, "%s\n    %s\n", s.Name, firstLine(s.Message))
		}
	}
	var list strings.Builder
	for _, sk := range skips {
		fmt.Fprintf(&list, "--skip=%s\n    %s\n", sk.Pattern, sk.Reason)
	}
	files := map[string]string{
		"summary.txt": Summarize(results).String() + "\n",
		"skipped.txt": skipped.String(),
		"failed.txt":  failed.String(),
		"skips.txt":   list.String(),
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// junitSuites is what ginkgo's --junit-report writes.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// ReadJUnit reads a ginkgo JUnit report: its specs ([It] cases; the
// suite's setup nodes are reported as failures of a spec of their own).
func ReadJUnit(path string) ([]SpecResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var js junitSuites
	if err := xml.Unmarshal(b, &js); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []SpecResult
	for _, s := range js.Suites {
		for _, c := range s.Cases {
			r := SpecResult{Name: strings.TrimSpace(strings.TrimPrefix(c.Name, "[It]")), State: "passed",
				Time: time.Duration(c.Time * float64(time.Second))}
			switch {
			case c.Failure != nil:
				r.State, r.Message = "failed", c.Failure.Message
				if r.Message == "" {
					r.Message = c.Failure.Text
				}
			case c.Error != nil:
				r.State, r.Message = "failed", c.Error.Message
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				r.State = "skipped"
				if c.Skipped != nil {
					r.Message = c.Skipped.Message
				}
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// Comparison is kurma's run beside the baseline's.
type Comparison struct {
	// Regressions: specs the baseline passes and kurma does not.
	Regressions []string
	// Failures: every spec kurma fails.
	Failures []string
	// ExtraSkips: specs kurma skips and the baseline runs.
	ExtraSkips []string
	// Table: every spec with both states, for the results.
	Table string
}

// Compare holds kurma's results to the baseline's.
func Compare(baseline, kurma []SpecResult) Comparison {
	base := map[string]SpecResult{}
	for _, r := range baseline {
		base[r.Name] = r
	}
	var c Comparison
	var t strings.Builder
	fmt.Fprintf(&t, "%-8s %-8s %s\n", "BASELINE", "KURMA", "SPEC")
	for _, k := range kurma {
		b, ok := base[k.Name]
		bs := "-"
		if ok {
			bs = b.State
		}
		fmt.Fprintf(&t, "%-8s %-8s %s\n", bs, k.State, k.Name)
		if k.State == "failed" {
			c.Failures = append(c.Failures, k.Name)
		}
		if ok && b.State == "passed" && k.State != "passed" {
			c.Regressions = append(c.Regressions, k.Name)
		}
		if k.State == "skipped" && (!ok || b.State != "skipped") {
			c.ExtraSkips = append(c.ExtraSkips, k.Name)
		}
	}
	fmt.Fprintf(&t, "\nbaseline: %s\nkurma:    %s\n", Summarize(baseline), Summarize(kurma))
	c.Table = t.String()
	return c
}
