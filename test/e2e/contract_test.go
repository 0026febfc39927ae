package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// The image contract's optional verbs (issue 11, part B): gc, check and
// status through cni-netplugin, and kurmad's metrics and call transcripts.

// masqNet is bridge + host-local with ipMasq, the Kurma spec's mynet shape:
// the plugin image has nft and no iptables, so the rules are nftables'.
func masqNet(name, bridge, subnet string) netDef {
	n := bridgeNet(name, bridge, subnet, "eth{{num}}", true)
	n.Conf["ipMasq"] = true
	return n
}

// TestGCAfterJournalLost: the journal is deleted while pods exist; the
// next kurmad knows none of them, and its boot-time gc deletes every one
// (veth, host-local lease, masquerade rule) through the plugin's cached
// attachments before the orphan netns files go.
func TestGCAfterJournalLost(t *testing.T) {
	e := newEnv(t)
	e.writeConfig([]netDef{masqNet("a", "kt-e2e0", "10.204.0.0/16")}, nil)
	e.start()
	var ids []string
	for range 3 {
		ids = append(ids, e.createPod().ID)
	}
	t.Cleanup(func() { _ = testutil.DeleteMasqueradeRules(ids...) }) // when the test fails
	if n := len(testutil.MasqueradeRules(ids...)); n != 3 {
		t.Fatalf("%d masquerade rules for 3 pods, want 3", n)
	}
	if n := len(e.PodObjects(e2eBridges).Leases); n != 3 {
		t.Fatalf("%d leases for 3 pods, want 3", n)
	}
	e.stop()
	if err := os.Remove(filepath.Join(e.StateDir, "kurmad.db")); err != nil {
		t.Fatal(err)
	}

	e.start()
	if rules := testutil.MasqueradeRules(ids...); len(rules) > 0 {
		t.Errorf("masquerade rules of the forgotten pods are left:\n%s", strings.Join(rules, "\n"))
	}
	e.checkCleanLive() // no pod, netns file, lease or veth
	if err := e.SyncLog(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	deleted := regexp.MustCompile(`stale attachment deleted container=([0-9a-f-]{36})`).FindAllStringSubmatch(e.Log(), -1)
	for _, id := range ids {
		if !slices.ContainsFunc(deleted, func(m []string) bool { return m[1] == id }) {
			t.Errorf("the wrapper's gc did not log deleting pod %s's attachment", id)
		}
	}
	e.stop()
	e.checkCleanStopped()
}

// TestCheckDegraded: deleting a pod's veth by hand makes its check fail
// with the plugin's message: `pod check` exits 1 and says why, pod ls shows
// the pod degraded, and the periodic check finds the same on its own.
func TestCheckDegraded(t *testing.T) {
	e := newEnv(t)
	e.writeConfig([]netDef{bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)},
		map[string]any{"check_interval": "300ms"})
	e.start()
	sick, well := e.createPod("--name", "kte-sick"), e.createPod("--name", "kte-well")
	out := e.mustCtl("pod", "check", "kte-sick")
	if !strings.Contains(out, "passed") {
		t.Fatalf("pod check of a whole pod:\n%s", out)
	}

	testutil.DelLinkIn(t, sick.Netns, "eth0")
	// The periodic check notices first or pod check does: either way the
	// pod is degraded, and ls says so.
	testutil.WaitFor(t, 10*time.Second, "pod ls to show kte-sick degraded", func() error {
		for _, p := range e.listPods() {
			if p.ID == sick.ID && (p.Check == nil || !p.Check.Degraded) {
				return fmt.Errorf("kte-sick: %+v", p.Check)
			}
			if p.ID == well.ID && p.Check != nil && p.Check.Degraded {
				t.Fatalf("kte-well degraded: %+v", p.Check)
			}
		}
		return nil
	})
	out, errOut, err := e.ctl("pod", "check", "kte-sick")
	if exitCode(err) != 1 || !strings.Contains(out, "failed") || !strings.Contains(out, "eth0") {
		t.Errorf("pod check after the veth was deleted: exit %d\nstdout: %s\nstderr: %s", exitCode(err), out, errOut)
	}
	ls := e.mustCtl("pod", "ls")
	if !regexp.MustCompile(`kte-sick .*degraded: a: .*eth0`).MatchString(ls) || !regexp.MustCompile(`kte-well .*ready`).MatchString(ls) {
		t.Errorf("pod ls:\n%s", ls)
	}
	// The API: GET /v1/pods/{id}/check answers the pod with the outcome.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := e.Client.CheckPod(ctx, sick.ID)
	if err != nil || p.Check == nil || !p.Check.Degraded || len(p.Check.Attachments) != 1 || p.Check.Attachments[0].Outcome != api.CheckFailed {
		t.Errorf("GET /v1/pods/%s/check: %+v, %v", sick.ID, p, err)
	}
	e.mustCtl("pod", "rm", sick.ID, well.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestStatusUnavailable: a network whose plugin's STATUS fails is shown
// unavailable with the plugin's message and creates on it get 503 naming
// it, while its pods can still be deleted; it serves again once STATUS
// passes.
func TestStatusUnavailable(t *testing.T) {
	e := newEnv(t)
	st := cnitestNet("st", "ok")
	st.Conf["cniVersion"] = "1.1.0" // libcni sends STATUS from 1.1.0 on
	st.Conf["notReadyFile"] = filepath.Join(cnitestStateDir, "not-ready")
	e.writeConfig([]netDef{bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true), st},
		map[string]any{"status_interval": "200ms"})
	e.start()
	old := e.createPod("--net", "st")

	notReady := filepath.Join(e.StateDir, "networks", "st", "not-ready")
	if err := os.WriteFile(notReady, []byte("uplink down\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var n api.Generation
	testutil.WaitFor(t, 10*time.Second, "network st to be unavailable", func() error {
		return e.networkIn("st", api.StateUnavailable, &n)
	})
	if !strings.Contains(n.Reason, "uplink down") || n.Pid == 0 {
		t.Errorf("unavailable network: %+v, want the plugin's message and its pid", n)
	}
	if out := e.mustCtl("net", "ls"); !regexp.MustCompile(`st +1 +unavailable .*uplink down`).MatchString(out) {
		t.Errorf("net ls:\n%s", out)
	}
	_, took, err := e.timedCreate("a", "st")
	wantUnavailable(t, "st not ready", "st", err, took)
	var aerr *api.Error
	if errors.As(err, &aerr) && !strings.Contains(aerr.Message, "uplink down") {
		t.Errorf("the 503 does not carry the plugin's message: %s", aerr.Message)
	}
	if pods := e.listPods(); len(pods) != 1 {
		t.Errorf("%d pods after the refused create, want 1", len(pods))
	}
	e.mustCtl("pod", "rm", old.ID) // del still runs

	if err := os.Remove(notReady); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "network st to run again", func() error {
		return e.networkIn("st", api.StateRunning, &n)
	})
	p := e.createPod("--net", "st")
	e.mustCtl("pod", "rm", p.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// scrape GETs kurmad's /metrics on its unix socket.
func scrape(t *testing.T, sock string) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	resp, err := hc.Get("http://kurmad/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// metric is the value of the series whose line starts with name{labels}.
func metric(t *testing.T, out, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Errorf("no series %s in the scrape", series)
	return -1
}

// TestMetrics: after N creates and N deletes the call counters say N adds
// and N dels, the latency histograms hold N observations, and the pods,
// networks, fetch and journal series are there.
func TestMetrics(t *testing.T) {
	const n = 5
	e := newEnv(t)
	sock := filepath.Join(e.Dir, "metrics.sock")
	e.writeConfig([]netDef{bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)},
		map[string]any{"metrics_listen": sock})
	e.start()
	// The first scrape, before any pod or request: every counter is there
	// at 0, and the build.
	out := scrape(t, sock)
	for _, series := range []string{
		`kurma_plugin_calls_total{network="a",outcome="timeout",verb="add"}`,
		`kurma_runtime_pods_dropped_total{reason="netns_gone"}`,
		`kurma_runtime_pods_dropped_total{reason="netns_replaced"}`,
		`kurma_runtime_pods_rebound_total`,
		`kurma_api_requests_total{code="5xx",route="POST /v1/pods"}`,
	} {
		if got := metric(t, out, series); got != 0 {
			t.Errorf("first scrape: %s = %v, want 0", series, got)
		}
	}
	if !regexp.MustCompile(`(?m)^kurma_build_info\{goversion="go[^"]+",version="` + regexp.QuoteMeta(buildVersion) + `"\} 1$`).MatchString(out) {
		t.Errorf("first scrape has no kurma_build_info with version %s", buildVersion)
	}
	// A network a reload adds has its call series at 0 from the reload on.
	e.writeConfig([]netDef{bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true),
		{Name: "added", Image: "file:///nonexistent/kte.aci", Conf: map[string]any{"type": "bridge"}}},
		map[string]any{"metrics_listen": sock})
	if res := e.reload(); !slices.Equal(res.Added, []string{"added"}) {
		t.Fatalf("reload added %v, want [added]", res.Added)
	}
	if got := metric(t, scrape(t, sock), `kurma_plugin_calls_total{network="added",outcome="unavailable",verb="add"}`); got != 0 {
		t.Errorf("after the reload: the added network's unavailable adds = %v, want 0", got)
	}
	var ids []string
	for range n {
		ids = append(ids, e.createPod().ID)
	}
	out = scrape(t, sock)
	if got := metric(t, out, `kurma_api_requests_total{code="2xx",route="POST /v1/pods"}`); got != n {
		t.Errorf("API creates counted: %v, want %d", got, n)
	}
	if got := metric(t, out, `kurma_api_request_duration_seconds_count{route="POST /v1/pods"}`); got != n {
		t.Errorf("API create latencies observed: %v, want %d", got, n)
	}
	if got := metric(t, out, `kurma_plugin_calls_total{network="a",outcome="ok",verb="add"}`); got != n {
		t.Errorf("adds counted: %v, want %d", got, n)
	}
	if got := metric(t, out, `kurma_plugin_call_duration_seconds_count{network="a",verb="add"}`); got != n {
		t.Errorf("add latencies observed: %v, want %d", got, n)
	}
	if got := metric(t, out, `kurma_pods{state="ready"}`); got != n {
		t.Errorf("ready pods: %v, want %d", got, n)
	}
	e.mustCtl(append([]string{"pod", "rm"}, ids...)...)
	out = scrape(t, sock)
	if got := metric(t, out, `kurma_plugin_calls_total{network="a",outcome="ok",verb="del"}`); got != n {
		t.Errorf("dels counted: %v, want %d", got, n)
	}
	for series, want := range map[string]float64{
		`kurma_pods{state="ready"}`:                                          0,
		`kurma_network_state{generation="1",network="a",state="running"}`:    1,
		`kurma_network_restarts_total{generation="1",network="a"}`:           0,
		`kurma_image_fetch_duration_seconds_count{network="a",outcome="ok"}`: 1,
		`kurma_plugin_calls_total{network="a",outcome="ok",verb="gc"}`:       1, // after reconcile
	} {
		if got := metric(t, out, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, series := range []string{
		`kurma_plugin_call_duration_seconds_count{network="a",verb="status"}`, // the probe at start
		`kurma_journal_commit_duration_seconds_count`,
	} {
		if got := metric(t, out, series); got < 1 {
			t.Errorf("%s = %v, want at least 1", series, got)
		}
	}
	// Those series are there from the start, at 0.
	if failed := regexp.MustCompile(`(?m)^kurma_plugin_calls_total\{.*outcome="(unavailable|failed)".*\} [^0].*$`).FindAllString(out, -1); len(failed) > 0 {
		t.Errorf("a call failed or was refused: %s", strings.Join(failed, "; "))
	}
	e.checkCleanLive()
	e.stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("metrics socket left after stop: %v", err)
	}
	e.checkCleanStopped()
}

// TestTranscripts: pod inspect --calls shows the exact stdin each plugin
// got, the value of a redact_keys key replaced, with its argv, stdout,
// exit and the pid of the container that served it.
func TestTranscripts(t *testing.T) {
	e := newEnv(t)
	a := bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	a.Conf["auth"] = map[string]any{"user": "kurma", "secret": "hunter2"}
	e.writeConfig([]netDef{a}, map[string]any{"redact_keys": []string{"secret"}})
	e.start()
	p := e.createPod("--net", "a:IP=10.204.7.7")

	cfg, err := netconfig.Load(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	nw, _ := cfg.Network("a")
	sent, err := nw.PluginConfig([]netconfig.Arg{{Key: "IP", Value: "10.204.7.7"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sent), `"hunter2"`) {
		t.Fatalf("the plugin config holds no secret: %s", sent)
	}
	want := strings.Replace(string(sent), `"hunter2"`, `"[redacted]"`, 1)

	var calls []api.PluginCall
	out := e.mustCtl("pod", "inspect", p.ID, "--calls", "-o", "json")
	if err := json.Unmarshal([]byte(out), &calls); err != nil {
		t.Fatalf("pod inspect --calls -o json: %v\n%s", err, out)
	}
	nets, err := e.Client.Networks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 {
		t.Fatalf("%d calls kept, want the add: %+v", len(calls), calls)
	}
	c := calls[0]
	if c.Stdin != want {
		t.Errorf("stdin kept:\n%s\nwant exactly what the plugin got, redacted:\n%s", c.Stdin, want)
	}
	if c.Path != "/opt/network/add" || strings.Join(c.Args, " ") != p.Netns+" "+p.ID+" eth0" || c.ExitCode != 0 ||
		c.Stdout != p.Attachments[0].RawResult || c.Pid != nets[0].Pid || c.DurationMS <= 0 || c.Network != "a" {
		t.Errorf("call %+v\nwant add's argv, exit 0, its raw result as stdout and pid %d", c, nets[0].Pid)
	}
	if text := e.mustCtl("pod", "inspect", p.ID, "--calls"); !strings.Contains(text, "stdin:\n"+want+"\n") || strings.Contains(text, "hunter2") {
		t.Errorf("pod inspect --calls:\n%s", text)
	}

	// A check is kept too: its stdin carries the add's result as
	// prevResult, and the secret redacted.
	e.mustCtl("pod", "check", p.ID)
	calls = nil
	if err := json.Unmarshal([]byte(e.mustCtl("pod", "inspect", p.ID, "--calls", "-o", "json")), &calls); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[1].Path != "/opt/network/check" || !strings.Contains(calls[1].Stdin, `"prevResult":{`) ||
		!strings.Contains(calls[1].Stdin, `"secret": "[redacted]"`) || strings.Contains(calls[1].Stdin, "hunter2") {
		t.Errorf("calls after a check: %+v", calls)
	}
	e.mustCtl("pod", "rm", p.ID)
	if _, errOut, err := e.ctl("pod", "inspect", p.ID, "--calls"); err == nil || !strings.Contains(errOut, "not found") {
		t.Errorf("pod inspect --calls of a removed pod: %v %s", err, errOut)
	}
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}
