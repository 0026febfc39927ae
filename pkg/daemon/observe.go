package daemon

import (
	"context"
	"errors"
	"net"
	"path"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/metrics"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
	"github.com/kurma-project/kurma/pkg/transcript"
)

// openObservers makes the transcripts and, when metrics_listen is set, the
// metrics and their listener (a busy address stops the boot here, before
// anything runs). The journal feeds the commit latencies.
func (d *Daemon) openObservers() (net.Listener, error) {
	d.transcripts = transcript.New(transcript.Options{RedactKeys: d.cfg.RedactKeys})
	if d.cfg.MetricsListen == "" {
		return nil, nil
	}
	l, err := metrics.Listen(d.cfg.MetricsListen)
	if err != nil {
		return nil, err
	}
	d.metrics = metrics.New(metrics.Sources{Networks: d.networkStates, Pods: d.podStates})
	d.store.OnCommit(d.metrics.ObserveCommit)
	return l, nil
}

// serveMetrics serves the metrics on l until ctx ends. It starts once the
// plugin containers and the pod manager exist (what a scrape reads).
func (d *Daemon) serveMetrics(ctx context.Context, l net.Listener) {
	d.log.WithField("address", d.cfg.MetricsListen).Info("serving metrics")
	if err := d.metrics.Serve(ctx, l); err != nil {
		d.log.WithError(err).Error("metrics endpoint stopped")
	}
}

// networkStates is the metrics' view of the networks.
func (d *Daemon) networkStates() []metrics.NetworkState {
	var out []metrics.NetworkState
	for _, s := range d.containers.Status() {
		out = append(out, metrics.NetworkState{Name: s.Name, State: s.State, Restarts: s.Restarts})
	}
	return out
}

// podStates counts pods by state: ready, degraded (ready, but a plugin's
// last check failed), deleting and failed.
func (d *Daemon) podStates() map[string]int {
	counts := map[string]int{}
	for _, p := range d.pods.List() {
		s := p.Phase
		if s == string(state.PhaseReady) && p.Check != nil && p.Check.Degraded {
			s = "degraded"
		}
		counts[s]++
	}
	return counts
}

// onCall hears every plugin call networkpod made or refused: it counts it
// and, for a pod's call (add, del, check: argv is <netns> <pod uuid>
// [ifname]), keeps its transcript.
func (d *Daemon) onCall(c *networkpod.Call) {
	d.metrics.ObserveCall(c.Network, path.Base(c.Path), outcome(c.Err), c.Duration)
	switch c.Path {
	case podnet.AddPath, podnet.DelPath, podnet.CheckPath:
	default:
		return
	}
	if len(c.Args) < 2 {
		return
	}
	t := transcript.Call{Network: c.Network, Path: c.Path, Args: c.Args, ExitCode: c.ExitCode, Signal: c.Signal,
		Start: c.Start, Duration: c.Duration, Pid: c.Pid, InProcess: c.InProcess}
	if c.Err != nil {
		t.Error = c.Err.Error()
	}
	d.transcripts.Record(c.Args[1], t, c.Stdin, c.Stdout, c.Stderr)
}

// outcome is a call's outcome label.
func outcome(err error) string {
	switch {
	case err == nil:
		return metrics.OutcomeOK
	case errors.Is(err, networkpod.ErrTimeout):
		return metrics.OutcomeTimeout
	case errors.Is(err, networkpod.ErrUnavailable):
		return metrics.OutcomeUnavailable
	case errors.Is(err, networkpod.ErrPluginFailed):
		return metrics.OutcomeFailed
	}
	return metrics.OutcomeError
}

// startLoops starts the periodic work after boot: every network's gc
// (gc_interval) and every ready pod's check (check_interval), each off at
// 0. The returned function stops them and waits, before the plugin
// containers are stopped.
func (d *Daemon) startLoops(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	every := func(what string, interval time.Duration, run func(context.Context)) {
		if interval <= 0 {
			return
		}
		d.log.WithField("interval", interval).Info("periodic " + what + " on")
		wg.Go(func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					run(ctx)
				}
			}
		})
	}
	every("gc", d.cfg.GCInterval, func(ctx context.Context) {
		if failed := d.pods.Collect(ctx); failed > 0 {
			d.log.WithField("failed", failed).Warn("periodic gc: some networks could not collect")
		}
	})
	every("check", d.cfg.CheckInterval, func(ctx context.Context) {
		start := time.Now()
		n := d.pods.CheckAll(ctx)
		d.log.WithFields(logrus.Fields{"degraded": n, "duration": time.Since(start)}).Debug("periodic check")
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
