package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// scrape serves m on a unix socket and returns what GET /metrics answers.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "m.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v %v, want mode 0600", fi.Mode(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 10 * time.Second}
	resp, err := hc.Get("http://kurmad/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

func TestSeries(t *testing.T) {
	m := New(Sources{
		Generations: func() []api.Generation {
			return []api.Generation{
				{Network: "mynet", Generation: 2, State: "running"},
				{Network: "mynet", Generation: 1, State: "retiring", Restarts: 2},
			}
		},
		Pods:               func() map[string]int { return map[string]int{"ready": 3, "degraded": 1} },
		TranscriptsDropped: func() uint64 { return 7 },
	})
	for range 3 {
		m.ObserveCall("mynet", "add", OutcomeOK, 20*time.Millisecond)
	}
	m.ObserveCall("mynet", "del", OutcomeTimeout, time.Second)
	m.ObserveCall("mynet", "add", OutcomeUnavailable, 0)
	m.ObserveFetch("mynet", true, 2*time.Second)
	m.ObserveCommit(3*time.Millisecond, 2)
	out := scrape(t, m)
	for _, want := range []string{
		`kurma_plugin_calls_total{network="mynet",outcome="ok",verb="add"} 3`,
		`kurma_plugin_calls_total{network="mynet",outcome="timeout",verb="del"} 1`,
		`kurma_plugin_calls_total{network="mynet",outcome="unavailable",verb="add"} 1`,
		`kurma_plugin_call_duration_seconds_count{network="mynet",verb="add"} 3`,
		`kurma_plugin_call_duration_seconds_bucket{network="mynet",verb="add",le="0.032"} 3`,
		`kurma_image_fetch_duration_seconds_count{network="mynet",outcome="ok"} 1`,
		`kurma_journal_commit_duration_seconds_count 1`,
		`kurma_journal_syncs_total 2`,
		`kurma_network_state{generation="2",network="mynet",state="running"} 1`,
		`kurma_network_state{generation="1",network="mynet",state="retiring"} 1`,
		`kurma_network_restarts_total{generation="1",network="mynet"} 2`,
		`kurma_network_restarts_total{generation="2",network="mynet"} 0`,
		`kurma_pods{state="ready"} 3`,
		`kurma_pods{state="degraded"} 1`,
		`kurma_pods{state="failed"} 0`,
		`kurma_transcripts_dropped_total 7`,
		`go_goroutines`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(out, want+"\n") && !strings.Contains(out, want+" ") {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.ObserveCall("n", "add", OutcomeOK, time.Millisecond)
	m.ObserveFetch("n", false, time.Millisecond)
	m.ObserveCommit(time.Millisecond, 1)
	m.ObserveRequest("GET /v1/pods", 200, time.Millisecond)
	m.AddNetworks("n")
}

// TestFirstScrape: before anything happened, every counter has its series
// at 0 (each network, verb and outcome; each API route and status class;
// each drop reason) and kurma_build_info names the version; a request
// counts under its route and class.
func TestFirstScrape(t *testing.T) {
	m := New(Sources{Version: "v1.2.3", Networks: []string{"mynet"}, Routes: api.Patterns(), DroppedReasons: []string{"netns_gone"}})
	out := scrape(t, m)
	for _, want := range []string{
		`kurma_plugin_calls_total{network="mynet",outcome="unavailable",verb="check"} 0`,
		`kurma_api_requests_total{code="4xx",route="DELETE /v1/pods/{id}"} 0`,
		`kurma_runtime_pods_dropped_total{reason="netns_gone"} 0`,
		`kurma_runtime_pods_rebound_total 0`,
		`kurma_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("first scrape lacks %s", want)
		}
	}
	// A network a reload adds has its series at 0 from then on.
	const added = `kurma_plugin_calls_total{network="addednet",outcome="ok",verb="add"} 0`
	if strings.Contains(out, added+"\n") {
		t.Fatalf("addednet has series before it was added")
	}
	m.AddNetworks("addednet")
	if out := scrape(t, m); !strings.Contains(out, added+"\n") {
		t.Errorf("scrape after AddNetworks lacks %s", added)
	}
	m.ObserveRequest("GET /v1/pods/{id}", 404, time.Millisecond)
	m.ObserveRequest("", 404, time.Millisecond)
	out = scrape(t, m)
	for _, want := range []string{`kurma_api_requests_total{code="4xx",route="GET /v1/pods/{id}"} 1`, `kurma_api_requests_total{code="4xx",route="none"} 1`,
		`kurma_api_request_duration_seconds_count{route="GET /v1/pods/{id}"} 1`} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); !errors.Is(err, api.ErrNotSocket) || !strings.Contains(err.Error(), "metrics_listen "+file+": exists and is not a socket") {
		t.Errorf("Listen on a file: %v, want ErrNotSocket naming the path", err)
	}
	sock := filepath.Join(dir, "s")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock); !errors.Is(err, api.ErrSocketServed) || !strings.Contains(err.Error(), "metrics_listen "+sock+": another process is serving it") {
		t.Errorf("Listen on a live socket: %v, want ErrSocketServed naming the path", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l, err = Listen(sock) // stale
	if err != nil {
		t.Fatalf("Listen on a stale socket: %v", err)
	}
	l.Close()
	l, err = Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
