package daemon

import (
	"context"
	"errors"
	"net"
	"path"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"

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
	d.transcripts = transcript.New(transcript.Options{RedactKeys: d.config().RedactKeys})
	if d.config().MetricsListen == "" {
		return nil, nil
	}
	l, err := metrics.Listen(d.config().MetricsListen)
	if err != nil {
		return nil, err
	}
	d.metrics = metrics.New(metrics.Sources{Generations: func() []api.Generation { return wireGenerations(d.nets.Generations()) },
		Pods: d.podStates, TranscriptsDropped: d.transcripts.Dropped,
		Version: d.opts.Version, Networks: d.config().Names(), Routes: api.Patterns(),
		DroppedReasons: []string{podnet.DroppedNetnsGone, podnet.DroppedNetnsReplaced}})
	d.store.OnCommit(d.metrics.ObserveCommit)
	return l, nil
}

// serveMetrics serves the metrics on l until ctx ends. It starts once the
// plugin containers and the pod manager exist (what a scrape reads).
func (d *Daemon) serveMetrics(ctx context.Context, l net.Listener) {
	d.log.WithField("address", d.config().MetricsListen).Info("serving metrics")
	if err := d.metrics.Serve(ctx, l); err != nil {
		d.log.WithError(err).Error("metrics endpoint stopped")
	}
}

// podStates counts pods by state: ready, degraded (ready, but a plugin's
// last check failed), deleting and failed.
func (d *Daemon) podStates() map[string]int {
	counts := map[string]int{}
	for _, p := range d.pods.List() {
		s := string(p.Phase)
		if c := d.pods.LastCheck(p.ID); p.Phase == state.PhaseReady && c != nil && c.Degraded {
			s = "degraded"
		}
		counts[s]++
	}
	return counts
}

// onCall hears every plugin call networkpod made or refused: it counts it
// and, for a pod's call (a netplugin.Verb with Pod: argv is <netns> <pod
// uuid> [ifname]), keeps its transcript.
func (d *Daemon) onCall(c *networkpod.Call) {
	d.metrics.ObserveCall(c.Network, path.Base(c.Path), outcome(c.Err), c.Duration)
	if v, ok := netplugin.VerbOf(c.Path); !ok || !v.Pod {
		return
	}
	if len(c.Args) < 2 {
		return
	}
	t := transcript.Call{Network: c.Network, Generation: c.Generation, Path: c.Path, Args: c.Args, ExitCode: c.ExitCode,
		Signal: c.Signal, Start: c.Start, Duration: c.Duration, Pid: c.Pid, InProcess: c.InProcess}
	if c.Err != nil {
		t.Error = c.Err.Error()
	}
	d.transcripts.Record(c.Args[1], t, c.Stdin, c.Stdout, c.Stderr)
}

// gcAfterForce runs network's gc after a pod was removed by force while
// its del there did not succeed: the gc knows what is still valid and
// cleans what that del left. When no generation of the network runs, the
// gc waits for one (podnet.ErrGCWaits), as the pod's del would have.
func (d *Daemon) gcAfterForce(ctx context.Context, network string) {
	log := d.log.WithFields(logrus.Fields{"network": network, "op": "gc"})
	switch err := d.pods.GC(ctx, network); {
	case errors.Is(err, podnet.ErrGCWaits):
		log.Info("gc after a removal by force waits for the network's plugin container to run")
	case err != nil:
		log.WithError(err).Warn("gc after a removal by force failed; what the del left may stay until a later gc succeeds")
	default:
		log.Info("gc ran after a removal by force")
	}
}

// outcome is a call's outcome label.
func outcome(err error) string {
	switch {
	case err == nil:
		return metrics.OutcomeOK
	case errors.Is(err, netplugin.ErrTimeout):
		return metrics.OutcomeTimeout
	case errors.Is(err, netplugin.ErrUnavailable):
		return metrics.OutcomeUnavailable
	case errors.Is(err, netplugin.ErrPluginFailed):
		return metrics.OutcomeFailed
	}
	return metrics.OutcomeError
}

// startLoops starts the periodic work in the background: every network's
// gc (gc_interval), every ready pod's check (check_interval) and the look
// at the runtime pods (runtime_check_interval; see
// podnet.Manager.CheckRuntimes), each off at 0, each interval read again
// when a reload changed the config.
func (d *Daemon) startLoops(ctx context.Context) {
	d.background(func() {
		d.every(ctx, "runtime check", func(c *netconfig.Config) time.Duration { return c.RuntimeCheckInterval }, d.checkRuntimes)
	})
	d.background(func() {
		d.every(ctx, "gc", func(c *netconfig.Config) time.Duration { return c.GCInterval }, func(ctx context.Context) {
			if failed := d.pods.Collect(ctx); failed > 0 {
				d.log.WithField("failed", failed).Warn("periodic gc: some networks could not collect")
			}
		})
	})
	d.background(func() {
		d.every(ctx, "check", func(c *netconfig.Config) time.Duration { return c.CheckInterval }, func(ctx context.Context) {
			start := time.Now()
			n := d.pods.CheckAll(ctx)
			d.log.WithFields(logrus.Fields{"degraded": n, "duration": time.Since(start)}).Debug("periodic check")
		})
	})
}

// checkRuntimes looks at every runtime pod once (see
// podnet.Manager.CheckRuntimes); what it did is logged by podnet, and
// summed up here when it did anything.
func (d *Daemon) checkRuntimes(ctx context.Context) {
	start := time.Now()
	r := d.pods.CheckRuntimes(ctx)
	log := d.log.WithFields(logrus.Fields{"op": "runtime-check", "live": r.Live, "rebound": r.Rebound, "released": r.Released,
		"waiting": r.Waiting, "unknown": r.Unknown, "duration": time.Since(start)})
	if r.Rebound+r.Released+r.Waiting+r.Unknown > 0 {
		log.Info("runtime pods checked")
		return
	}
	log.Debug("runtime pods checked")
}

// every runs run each interval of the config until ctx ends; an interval
// of 0 runs nothing until a reload sets one. A reload that changes the
// interval starts it anew.
func (d *Daemon) every(ctx context.Context, what string, interval func(*netconfig.Config) time.Duration, run func(context.Context)) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var tick <-chan time.Time
	cur := time.Duration(-1)
	for {
		d.mu.Lock()
		iv, changed := interval(d.config()), d.cfgChanged
		d.mu.Unlock()
		if iv != cur {
			prev := cur
			cur, tick = iv, nil
			t.Stop()
			if iv > 0 {
				t.Reset(iv)
				tick = t.C
				d.log.WithField("interval", iv).Info("periodic " + what + " on")
			} else if prev > 0 {
				d.log.Info("periodic " + what + " off")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick:
			run(ctx)
			t.Reset(cur)
		}
	}
}
