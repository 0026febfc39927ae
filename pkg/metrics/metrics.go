// Package metrics is kurmad's Prometheus endpoint: plugin calls by network,
// verb and outcome with their latencies, image fetch durations, journal
// commit latencies, and, read when scraped, each network's state and
// restarts and the pods by state. kurmad's parts do not import it: the
// daemon feeds it from their hooks (networkpod's OnCall, the journal's
// OnCommit) and gives it functions to read the rest.
package metrics

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Outcomes of a plugin call (the outcome label).
const (
	OutcomeOK          = "ok"          // exit 0
	OutcomeFailed      = "failed"      // the plugin ran and failed (non-zero exit, a signal, could not start)
	OutcomeTimeout     = "timeout"     // plugin_timeout or the caller's deadline: every process of the call was killed
	OutcomeUnavailable = "unavailable" // the network was not running: nothing ran
	OutcomeError       = "error"       // anything else (the exec agent could not be talked to, a cancelled request)
)

// Sources are read at every scrape.
type Sources struct {
	// Generations lists every generation as GET /v1/networks does; the
	// state and restarts series show each one's Network, Generation,
	// State and Restarts.
	Generations func() []api.Generation
	// Pods counts pods by state (ready, degraded, deleting, failed).
	Pods func() map[string]int
	// TranscriptsDropped counts the pods whose call transcripts were
	// dropped to keep the transcripts within their memory and pod caps.
	TranscriptsDropped func() uint64

	// Version is kurmad's (kurma_build_info).
	Version string
	// These label values have their counters at 0 from the first scrape,
	// before anything happened: the networks of the boot config (plugin
	// calls of every verb and outcome), the API's routes (requests of
	// every status class), the reasons a runtime pod is dropped for.
	Networks, Routes, DroppedReasons []string
}

// Status classes of an API request (the code label).
var statusClasses = []string{"2xx", "4xx", "5xx"}

// outcomes are the Outcome* values.
var outcomes = []string{OutcomeOK, OutcomeFailed, OutcomeTimeout, OutcomeUnavailable, OutcomeError}

// podStates are the states the pods series always has, zero or not.
var podStates = []string{"ready", "degraded", "deleting", "failed"}

// Metrics holds kurmad's series. A nil *Metrics observes nothing, so
// callers need not care whether metrics are on.
type Metrics struct {
	reg         *prometheus.Registry
	calls       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	fetches     *prometheus.HistogramVec
	commits     prometheus.Histogram
	syncs       prometheus.Counter
	dropped     *prometheus.CounterVec
	rebound     prometheus.Counter
	requests    *prometheus.CounterVec
	reqLatency  *prometheus.HistogramVec
	handler     http.Handler
	generations func() []api.Generation
	pods        func() map[string]int
	// transcriptsDropped reads the transcripts' drop count (Sources).
	transcriptsDropped func() uint64
}

// Descriptions of the series read at scrape time.
var (
	// The generation label is on these two only: they list the
	// generations that run now, so old ones leave the endpoint, where the
	// call counters would keep one series per generation forever.
	networkStateDesc = prometheus.NewDesc("kurma_network_state",
		"1 for the state each generation of each network's plugin container is in (fetching, starting, running, unavailable, retiring, failed, stopped).",
		[]string{"network", "generation", "state"}, nil)
	restartsDesc = prometheus.NewDesc("kurma_network_restarts_total",
		"Restarts of each generation of each network's plugin container since it started.", []string{"network", "generation"}, nil)
	podsDesc = prometheus.NewDesc("kurma_pods",
		"Pods by state: ready, degraded (a plugin's check failed), deleting, failed (a teardown that did not finish).", []string{"state"}, nil)
	transcriptsDroppedDesc = prometheus.NewDesc("kurma_transcripts_dropped_total",
		"Pods whose call transcripts were dropped, oldest first, to keep the transcripts within their memory and pod caps.", nil, nil)
)

// New returns the series, registered with the Go runtime's and the
// process's, reading src at each scrape.
func New(src Sources) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kurma_plugin_calls_total",
			Help: "Plugin calls (" + strings.Join(netplugin.VerbNames(), ", ") + ") by network, verb and outcome (ok, failed, timeout, unavailable, error), all generations together.",
		}, []string{"network", "verb", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kurma_plugin_call_duration_seconds",
			Help:    "Duration of the plugin calls that ran, by network and verb.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms .. 65 s
		}, []string{"network", "verb"}),
		fetches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kurma_image_fetch_duration_seconds",
			Help:    "Duration of each network's image fetch (download, verification, unpacking), by outcome (ok, failed).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 17), // 10 ms .. 11 min
		}, []string{"network", "outcome"}),
		syncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kurma_journal_syncs_total",
			Help: "fdatasyncs and fsyncs the journal made (a pod intent's sync of the log, shared by concurrent creates; two for each snapshot into bbolt).",
		}),
		commits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kurma_journal_commit_duration_seconds",
			Help:    "Duration of each time the journal made its writes durable: a sync of its log, or a snapshot into bbolt.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100 µs .. 3.3 s
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kurma_runtime_pods_dropped_total",
			Help: "Runtime pods (kurma-cni's) kurmad released because their runtime dropped the container without a DEL that reached kurmad, by reason: netns_gone (the runtime's netns path names no namespace any more), netns_replaced (it names another one).",
		}, []string{"reason"}),
		rebound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kurma_runtime_pods_rebound_total",
			Help: "Runtime pods whose lost bind mount kurmad made again because the runtime's container still lives.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kurma_api_requests_total",
			Help: `API requests by route (the pattern matched, "GET /v1/pods/{id}"; "none" for no route) and status class (2xx, 4xx, 5xx).`,
		}, []string{"route", "code"}),
		reqLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kurma_api_request_duration_seconds",
			Help:    "Duration of API requests by route, from the request read to the answer written.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20), // 100 µs .. 52 s
		}, []string{"route"}),
		generations:        src.Generations,
		pods:               src.Pods,
		transcriptsDropped: src.TranscriptsDropped,
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kurma_build_info",
		Help:        "1, labelled with kurmad's version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": src.Version, "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(m.calls, m.latency, m.fetches, m.commits, m.syncs, m.dropped, m.rebound, m.requests, m.reqLatency, buildInfo, stateCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.AddNetworks(src.Networks...)
	for _, r := range src.Routes {
		for _, c := range statusClasses {
			m.requests.WithLabelValues(r, c)
		}
	}
	for _, r := range src.DroppedReasons {
		m.dropped.WithLabelValues(r)
	}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// AddNetworks gives networks their plugin call series at 0 (every verb
// and outcome), as New does for the boot config's: a network a reload
// adds is scraped from then on, not from its first call.
func (m *Metrics) AddNetworks(names ...string) {
	if m == nil {
		return
	}
	for _, n := range names {
		for _, verb := range netplugin.VerbNames() {
			for _, o := range outcomes {
				m.calls.WithLabelValues(n, verb, o)
			}
		}
	}
}

// Handler serves the series in Prometheus' text format.
func (m *Metrics) Handler() http.Handler { return m.handler }

// ObserveCall counts one plugin call; d is its duration, observed in the
// latency histogram for calls that ran (not for unavailable ones).
func (m *Metrics) ObserveCall(network, verb, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(network, verb, outcome).Inc()
	if outcome != OutcomeUnavailable {
		m.latency.WithLabelValues(network, verb).Observe(d.Seconds())
	}
}

// ObserveRequest counts one API request of route ("" when none matched)
// answered with status after d (api.ServerOptions.OnRequest).
func (m *Metrics) ObserveRequest(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "none"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status/100)+"xx").Inc()
	m.reqLatency.WithLabelValues(route).Observe(d.Seconds())
}

// ObserveFetch records one image fetch of network.
func (m *Metrics) ObserveFetch(network string, ok bool, d time.Duration) {
	if m == nil {
		return
	}
	outcome := OutcomeOK
	if !ok {
		outcome = OutcomeFailed
	}
	m.fetches.WithLabelValues(network, outcome).Observe(d.Seconds())
}

// ObserveCommit records one time the journal made its writes durable,
// which took d and syncs fdatasyncs or fsyncs.
func (m *Metrics) ObserveCommit(d time.Duration, syncs int) {
	if m == nil {
		return
	}
	m.commits.Observe(d.Seconds())
	m.syncs.Add(float64(syncs))
}

// ObserveRuntimeDropped counts one runtime pod released because its
// runtime dropped it (reason: podnet's Dropped* values).
func (m *Metrics) ObserveRuntimeDropped(reason string) {
	if m == nil {
		return
	}
	m.dropped.WithLabelValues(reason).Inc()
}

// ObserveRuntimeRebound counts one runtime pod whose lost bind mount was
// made again.
func (m *Metrics) ObserveRuntimeRebound() {
	if m == nil {
		return
	}
	m.rebound.Inc()
}

// stateCollector reads the networks and pods when scraped.
type stateCollector struct{ m *Metrics }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- networkStateDesc
	ch <- restartsDesc
	ch <- podsDesc
	ch <- transcriptsDroppedDesc
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.generations != nil {
		for _, n := range c.m.generations() {
			gen := strconv.Itoa(n.Generation)
			ch <- prometheus.MustNewConstMetric(networkStateDesc, prometheus.GaugeValue, 1, n.Network, gen, n.State)
			ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(n.Restarts), n.Network, gen)
		}
	}
	if c.m.pods != nil {
		counts := c.m.pods()
		for _, s := range podStates {
			ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(counts[s]), s)
		}
	}
	if c.m.transcriptsDropped != nil {
		ch <- prometheus.MustNewConstMetric(transcriptsDroppedDesc, prometheus.CounterValue, float64(c.m.transcriptsDropped()))
	}
}
