package networkpod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Ready returns nil when the network's generation runs and its plugin has
// not said it cannot serve adds; otherwise the error a create gets at
// once, before anything is made: netplugin.ErrUnavailable with the reason (for a
// plugin that is not ready, its status message; for one still waiting for
// its image, that), or netplugin.ErrUnknownGeneration. It runs nothing.
func (h *Host) Ready(network string, generation int) error {
	n, err := h.lookup(network, generation)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.runningLocked(); err != nil {
		return err
	}
	if n.state == StateRunning {
		return nil
	}
	return &netplugin.NetworkError{Network: network, Err: &netplugin.UnavailableError{Reason: n.reason}}
}

// Probe asks the plugin of each generation of network whose container
// runs for its status now, rather than at the next status_interval, and
// moves each between running and unavailable as the periodic probe does
// (CNI's STATUS answers from it). It returns once every probe ended or
// ctx did; a probe that ctx cut short changes nothing.
func (h *Host) Probe(ctx context.Context, network string) {
	var wg sync.WaitGroup
	for _, n := range h.all() {
		if n.spec.Network != network || !n.probes() {
			continue
		}
		inst, err := n.running()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.updateReadiness(ctx, inst)
		}()
	}
	wg.Wait()
}

// Running returns the generations of network whose container runs, so
// that calls run there (running, or unavailable: the plugin said it cannot
// serve adds), newest first.
func (h *Host) Running(network string) []int {
	var gens []int
	for _, n := range h.all() {
		if n.spec.Network != network {
			continue
		}
		if _, err := n.running(); err == nil {
			gens = append(gens, n.spec.Generation)
		}
	}
	slices.SortFunc(gens, func(a, b int) int { return b - a })
	return gens
}

// Provides reports whether the image of the network's generation has the
// executable path, an absolute path in the container such as
// /opt/network/check: the image contract's optional executables are asked
// only of images that have them. Symlinks are followed inside the image's
// root filesystem, never out of it. Each path is looked up once per
// generation (its image does not change once it has one); a generation
// still waiting for its image has none.
func (h *Host) Provides(network string, generation int, path string) bool {
	n, err := h.lookup(network, generation)
	if err != nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if has, ok := n.provides[path]; ok {
		return has
	}
	if n.spec.Image == nil {
		return false // not cached: its image is still to come
	}
	has := isExecutable(n.spec.Image.Rootfs, path)
	if n.provides == nil {
		n.provides = map[string]bool{}
	}
	n.provides[path] = has
	return has
}

// isExecutable reports whether path, resolved inside root, is a regular
// file with an execute bit.
func isExecutable(root, path string) bool {
	p, err := securejoin.SecureJoin(root, path)
	if err != nil {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// probes reports whether the generation's plugin is asked for its status.
func (g *generation) probes() bool {
	path := g.host.opts.StatusPath
	return path != "" && g.host.Provides(g.spec.Network, g.spec.Generation, path)
}

// readiness probes inst's status (when the image has the executable) and
// returns the state the generation is in: running, or unavailable with the
// reason.
func (g *generation) readiness(ctx context.Context, inst *instance) (state, reason string) {
	if !g.probes() {
		return StateRunning, ""
	}
	if err := g.probeStatus(ctx, inst); err != nil {
		return StateUnavailable, statusReason(err)
	}
	return StateRunning, ""
}

// updateReadiness probes inst again and moves the generation between
// running and unavailable, logging each change and telling
// Options.OnState of a change of state. A probe cut short by ctx changes
// nothing: the caller gave up, the plugin did not say.
func (g *generation) updateReadiness(ctx context.Context, inst *instance) {
	state, reason := g.readiness(ctx, inst)
	if ctx.Err() != nil {
		return
	}
	g.mu.Lock()
	changed := g.inst == inst && (g.state != state || g.reason != reason)
	moved := changed && g.state != state
	if changed {
		g.state, g.reason = state, reason
		if moved {
			g.since = time.Now()
		}
	}
	g.mu.Unlock()
	switch {
	case !changed:
	case state == StateUnavailable:
		g.log.WithField("reason", reason).Warn("plugin says it cannot serve adds: generation unavailable")
	default:
		g.log.Info("plugin ready again: generation running")
	}
	if cb := g.host.opts.OnState; cb != nil && changed { // a new reason too: it is shown
		cb(g.spec.Network, g.spec.Generation, state)
	}
}

// probeStatus runs the status executable in inst with the network's config
// on stdin. It gives up when the generation is stopped or its container ends.
func (g *generation) probeStatus(ctx context.Context, inst *instance) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-g.stop:
		case <-g.abandon:
		case <-inst.mainDone:
		case <-inst.agentDone:
		case <-ctx.Done():
		}
		cancel()
	}()
	call := netplugin.NewCall(netplugin.Target{Network: g.spec.Network, Generation: g.spec.Generation}, g.host.opts.StatusPath, nil, g.spec.Config)
	_, _, err := g.host.callInstance(ctx, g, inst, call)
	return err
}

// statusReason is what net ls shows for a failed status: the plugin's CNI
// error when it printed one, else the failure.
func statusReason(err error) string {
	var ee *netplugin.ExecError
	if errors.As(err, &ee) && ee.CNIError != nil {
		msg := fmt.Sprintf("plugin not ready: %s (CNI error %d)", ee.CNIError.Msg, ee.CNIError.Code)
		if ee.CNIError.Details != "" {
			msg += ": " + ee.CNIError.Details
		}
		return msg
	}
	var ne *netplugin.NetworkError
	if errors.As(err, &ne) {
		err = ne.Err
	}
	return "plugin not ready: status: " + err.Error()
}
