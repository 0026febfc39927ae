package networks

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Generations lists every generation of every network as `kurmactl net
// ls` shows it: the config's networks in config order, then those only
// journaled pods still hold; a network's generations newest first. A
// generation whose container runs (its plugin ready or not) that only
// serves the dels of its pods shows retiring; one waiting for its image,
// fetching or failed. Each counts the pods holding it (Pods).
func (c *Controller) Generations() []api.Generation {
	running := map[netplugin.Target]api.Generation{}
	for _, s := range c.host.Status() {
		running[netplugin.Target{Network: s.Network, Generation: s.Generation}] = api.Generation{
			Network: s.Network, Generation: s.Generation, State: s.State, Image: s.Image, Restarts: s.Restarts,
			Pid: s.Pid, Reason: s.Reason, Since: s.Since, NextRetry: s.NextRetry, Trespass: s.Trespass,
		}
	}
	c.mu.Lock()
	order := map[string]int{}
	for i, n := range c.cfg.Networks {
		order[n.Name] = i
	}
	out := make([]api.Generation, 0, len(c.gens))
	for k, g := range c.gens {
		n, ok := running[k]
		switch {
		case ok:
		case g.started: // handed to the host, not registered there yet
			n = api.Generation{Network: k.Network, Generation: k.Generation, State: api.StateStarting, Since: g.since}
		default:
			n = api.Generation{Network: k.Network, Generation: k.Generation, State: g.waiting, Reason: g.reason,
				Since: g.since, NextRetry: g.nextRetry}
			if n.State == api.StateFetching {
				g.fetch.wire(&n)
			}
		}
		if g.retiring && (n.State == api.StateRunning || n.State == api.StateUnavailable) {
			n.State = api.StateRetiring
		}
		n.Pods = len(g.holders)
		n.Role = netconfig.RoleAttach
		if g.entry != nil && g.entry.IsPolicy() {
			n.Role = netconfig.RolePolicy
		}
		if e := c.nets[k.Network]; e != nil && (e.serving == g || e.pending == g) {
			n.Default, n.NetworkPolicy = g.entry.Default, g.entry.NetworkPolicy
			n.PolicyNetworks = slices.Clone(g.entry.PolicyNetworks)
		}
		out = append(out, n)
	}
	c.mu.Unlock()
	rank := func(name string) int {
		if i, ok := order[name]; ok {
			return i
		}
		return len(order)
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := rank(out[i].Network), rank(out[j].Network); ri != rj {
			return ri < rj
		}
		if out[i].Network != out[j].Network {
			return out[i].Network < out[j].Network
		}
		return out[i].Generation > out[j].Generation
	})
	return out
}

// Probe asks the plugin of each running generation of the named networks
// for its status now, concurrently (see networkpod.Host.Probe): what
// Generations then shows is fresh.
func (c *Controller) Probe(ctx context.Context, networks ...string) {
	var wg sync.WaitGroup
	for _, name := range networks {
		wg.Go(func() { c.host.Probe(ctx, name) })
	}
	wg.Wait()
}

// Retry tries every failed generation of network again now: a fetch
// waiting for its next attempt, a container waiting to restart. It
// returns the network's generations (see Generations);
// netplugin.ErrUnknownNetwork when it has none.
func (c *Controller) Retry(network string) ([]api.Generation, error) {
	var fetches []chan struct{}
	var gens []int
	c.mu.Lock()
	for k, g := range c.gens {
		if k.Network != network {
			continue
		}
		gens = append(gens, k.Generation)
		if g.retryFetch != nil {
			fetches = append(fetches, g.retryFetch)
		}
	}
	c.mu.Unlock()
	if len(gens) == 0 {
		return nil, fmt.Errorf("%w %q (known networks: %s)", netplugin.ErrUnknownNetwork, network, strings.Join(c.Config().Names(), ", "))
	}
	for _, ch := range fetches {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	for _, gen := range gens {
		c.host.RetryNow(network, gen)
	}
	c.log.WithField("network", network).Info("retrying the network now, as asked")
	var out []api.Generation
	for _, n := range c.Generations() {
		if n.Network == network {
			out = append(out, n)
		}
	}
	return out, nil
}

// ImageUsers returns the networks, sorted, with a generation that runs
// from imageID (or will: a retiring generation waiting to restart): such
// an image cannot be removed, its containers and every later del of their
// pods need its rootfs.
func (c *Controller) ImageUsers(imageID string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var users []string
	for k, g := range c.gens {
		if g.spec.Image != nil && g.spec.Image.ID == imageID && !slices.Contains(users, k.Network) {
			users = append(users, k.Network)
		}
	}
	slices.Sort(users)
	return users
}
