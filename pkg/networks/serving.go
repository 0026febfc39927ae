package networks

import (
	"context"
	"fmt"
	"slices"

	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
)

// servingView is what new pods attach to at one instant: the config, each
// network as its serving generation's entry says, and where each network's
// attachments go. Replaced whole (publish), never changed.
type servingView struct {
	cfg *netconfig.Config
	to  map[string]netplugin.Serving
}

// publish makes new pods attach to the config's networks, each as its
// serving generation's entry says, through that generation.
func (c *Controller) publish() {
	defer c.changed()
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := *c.cfg
	cfg.Networks = make([]*netconfig.Network, 0, len(c.cfg.Networks))
	to := make(map[string]netplugin.Serving, len(c.cfg.Networks))
	for _, n := range c.cfg.Networks {
		e := c.nets[n.Name]
		if e == nil { // before Start planned the boot
			cfg.Networks = append(cfg.Networks, n)
			continue
		}
		g := e.serving
		cfg.Networks = append(cfg.Networks, g.entry)
		r := netplugin.Serving{Target: g.key}
		if g.spec.Image != nil {
			r.Image = g.spec.Image.ID
		}
		to[n.Name] = r
	}
	c.serving.Store(&servingView{cfg: &cfg, to: to})
}

// Serving returns, from one instant, the config new pods attach with (each
// network as the generation serving it runs it) and, by network name,
// where its new attachments go. Both are shared: read them, never change
// them.
func (c *Controller) Serving() (*netconfig.Config, map[string]netplugin.Serving) {
	r := c.serving.Load()
	return r.cfg, r.to
}

// Retain makes holder (a pod's ID, say) hold each generation of ts: a
// generation stops only once nothing holds it. Holding is a set: retaining
// twice is holding once. It retains nothing, and the error wraps
// netplugin.ErrUnknownGeneration, when one of ts is gone (a reload retired
// it and nothing held it): the caller asks Serving again.
func (c *Controller) Retain(holder string, ts ...netplugin.Target) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range ts {
		if g := c.gens[t]; g == nil || g.dropped {
			return &netplugin.NetworkError{Network: t.Network, Err: fmt.Errorf("%w %d", netplugin.ErrUnknownGeneration, t.Generation)}
		}
	}
	added := false
	for _, t := range ts {
		if _, ok := c.gens[t].holders[holder]; !ok {
			c.gens[t].holders[holder], added = struct{}{}, true
		}
	}
	if added {
		// Generations counts each generation's holders (Pods).
		c.changed()
	}
	return nil
}

// Release ends holder's hold of each generation of ts (those it does not
// hold are left alone). A retiring generation nothing holds any more
// stops, in the background.
func (c *Controller) Release(holder string, ts ...netplugin.Target) {
	c.mu.Lock()
	idle, released := false, false
	for _, t := range ts {
		if g := c.gens[t]; g != nil {
			if _, ok := g.holders[holder]; ok {
				delete(g.holders, holder)
				released = true
			}
			idle = idle || (g.retiring && len(g.holders) == 0)
		}
	}
	c.mu.Unlock()
	if released {
		c.changed()
	}
	if idle {
		c.background(c.stopRetired)
	}
}

// waitingLocked is the error a call to generation t gets while it waits
// for its image, nil when the host runs it (or does not know it: the
// host says so); c.mu is held.
func (c *Controller) waitingLocked(t netplugin.Target) error {
	g := c.gens[t]
	if g == nil || g.started {
		return nil
	}
	reason := g.reason
	if g.waiting == StateFetching {
		reason = "fetching its image"
	}
	return &netplugin.NetworkError{Network: t.Network, Err: &netplugin.UnavailableError{Reason: reason}}
}

func (c *Controller) waiting(t netplugin.Target) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitingLocked(t)
}

// Exec runs plugin call c in its generation (see networkpod.Host.Exec). A
// generation still waiting for its image runs nothing: the error wraps
// netplugin.ErrUnavailable with the reason (fetching, or why its fetch
// failed), and the host's OnCall hears of it as of any call it refused.
func (c *Controller) Exec(ctx context.Context, call netplugin.Call) (stdout, stderr []byte, err error) {
	if err := c.waiting(call.Target); err != nil {
		err = netplugin.WrapNetworkError(call.Network, call.Path, err)
		if c.opts.Host.OnCall != nil {
			c.opts.Host.OnCall(networkpod.RefusedCall(call, err))
		}
		return nil, nil, err
	}
	return c.host.Exec(ctx, call)
}

// Ready returns nil when generation t can serve adds now; otherwise the
// error a create gets at once (see networkpod.Host.Ready), a generation
// waiting for its image included.
func (c *Controller) Ready(t netplugin.Target) error {
	if err := c.waiting(t); err != nil {
		return err
	}
	return c.host.Ready(t.Network, t.Generation)
}

// Provides reports whether the image of network's generation gen has the
// executable path (see networkpod.Host.Provides); false while it waits
// for its image.
func (c *Controller) Provides(network string, gen int, path string) bool {
	if c.waiting(netplugin.Target{Network: network, Generation: gen}) != nil {
		return false
	}
	return c.host.Provides(network, gen, path)
}

// GCTarget is the generation network's gc runs in, and the config it gets
// (the one that generation's main executable got): the generation serving
// new pods when its container runs, else the newest whose container runs.
// A network's generations share its plugin state, so one gc serves them
// all. When none runs, the error wraps netplugin.ErrUnavailable (the gc
// waits: Started); when the network has no generation at all (neither
// the config nor a journaled pod knows it), netplugin.ErrUnknownNetwork.
func (c *Controller) GCTarget(network string) (netplugin.Target, []byte, error) {
	c.mu.Lock()
	serving, inConfig := 0, false
	if e := c.nets[network]; e != nil {
		serving, inConfig = e.serving.key.Generation, true
	}
	known := inConfig
	for k := range c.gens {
		known = known || k.Network == network
	}
	c.mu.Unlock()
	running := c.host.Running(network)
	t := netplugin.Target{Network: network}
	switch {
	case len(running) == 0 && !known:
		return t, nil, fmt.Errorf("%w %q", netplugin.ErrUnknownNetwork, network)
	case len(running) == 0:
		return t, nil, &netplugin.NetworkError{Network: network, Err: &netplugin.UnavailableError{Reason: "no generation of the network runs"}}
	case inConfig && slices.Contains(running, serving):
		t.Generation = serving
	default:
		t.Generation = running[0]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g := c.gens[t]; g != nil && !g.dropped {
		return t, g.spec.Config, nil
	}
	// Forgotten since the host listed it: it runs no more.
	return t, nil, &netplugin.NetworkError{Network: network, Err: &netplugin.UnavailableError{Reason: "no generation of the network runs"}}
}
