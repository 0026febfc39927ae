package networks

import (
	"context"
	"slices"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// Apply makes cfg the running config, network by network:
//   - a new network is fetched and started;
//   - a network gone from cfg retires: its generations keep running for
//     the dels of the pods attached to it, and stop when nothing holds
//     them; new pods cannot attach to it;
//   - a network whose image (image, verify, image_name),
//     allow_capabilities, allow_syscalls or plugin config changed gets a
//     new generation, started beside the old one. The old one serves new
//     pods until the new one's plugin is ready, then retires as above;
//     pods keep the generation and the config snapshot they were attached
//     with for their dels;
//   - a network where only default, containerInterface or
//     network_policy changed is updated in place, and an unchanged one
//     is not touched (same container, same pid; its image is not fetched
//     again). A network opting in to policy or out of it changes the
//     policy network's config (the networks it polices): that one gets a
//     new generation;
//   - plugin_timeout applies to the calls that start from then on, and
//     status_interval from each generation's next status probe.
//
// It returns what changed. The caller checks cfg first (whatever cannot
// change while kurmad runs); a generation that fails to start is not an
// error of Apply (it shows failed and is retried), only ctx's end while it
// waits for the first start attempts is.
func (c *Controller) Apply(ctx context.Context, cfg *netconfig.Config) (*api.ReloadResult, error) {
	res, start := c.diff(cfg)
	c.host.SetPluginTimeout(cfg.PluginTimeout)
	c.host.SetStatusInterval(cfg.StatusInterval)
	if err := c.startGenerations(ctx, start); err != nil {
		return nil, err
	}
	c.publish()
	c.stopRetired()
	return res, nil
}

// Plan is what Apply(cfg) would change, without changing anything
// (kurmactl reload --dry-run). The generations it would start are not
// made, so Plan says nothing of their numbers or their images' fetches.
func (c *Controller) Plan(cfg *netconfig.Config) *api.ReloadResult {
	res := newReloadResult()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range cfg.Networks {
		addPlan(res, n.Name, planOf(c.nets[n.Name], n))
	}
	for name := range c.nets {
		if _, ok := cfg.Network(name); !ok {
			res.Retired = append(res.Retired, name)
		}
	}
	slices.Sort(res.Retired)
	return res
}

// Kinds of change a reload makes to a network of the new config (plan).
const (
	planAdded   = "added"   // no such network ran: start it
	planServing = "serving" // the serving generation serves it: unchanged, or updated
	planPending = "pending" // the generation started to replace the serving one serves it
	planReplace = "replace" // a new generation must serve it
)

// plan is what becomes of network n, whose table entry is e (nil: none),
// and what changed in its entry since the generation serving it.
type plan struct {
	kind    string
	updated bool     // planServing: what kurmad reads at an attach changed
	keys    []string // what changed (netconfig.ChangedKeys)
}

// planOf is n's plan: definitions are compared by meaning (see
// definition), so a reformatted entry is its serving generation's.
func planOf(e *netEntry, n *netconfig.Network) plan {
	if e == nil {
		return plan{kind: planAdded}
	}
	p := plan{keys: netconfig.ChangedKeys(e.serving.entry, n)}
	def := Definition(n)
	switch {
	case e.serving.def == def && def != "":
		p.kind = planServing
		old := e.serving.entry
		p.updated = old.Default != n.Default || old.ContainerInterface != n.ContainerInterface || old.NetworkPolicy != n.NetworkPolicy
	case e.pending != nil && e.pending.def == def && def != "":
		p.kind = planPending
	default:
		p.kind = planReplace
	}
	return p
}

func newReloadResult() *api.ReloadResult {
	return &api.ReloadResult{Added: []string{}, Replaced: []string{}, Retired: []string{}, Updated: []string{}, Unchanged: []string{},
		Changes: map[string][]string{}}
}

// addPlan lists network name in res as p says, with what changed in it.
func addPlan(res *api.ReloadResult, name string, p plan) {
	switch {
	case p.kind == planAdded:
		res.Added = append(res.Added, name)
	case p.kind == planServing && !p.updated:
		res.Unchanged = append(res.Unchanged, name)
		return
	case p.kind == planServing:
		res.Updated = append(res.Updated, name)
	default:
		res.Replaced = append(res.Replaced, name)
	}
	if len(p.keys) > 0 {
		res.Changes[name] = p.keys
	}
}

// diff makes cfg the running config in the network table (see Apply) and
// returns what changed and the generations to start.
func (c *Controller) diff(cfg *netconfig.Config) (*api.ReloadResult, []*generation) {
	res := newReloadResult()
	var start []*generation
	c.mu.Lock()
	for _, n := range cfg.Networks {
		e := c.nets[n.Name]
		p := planOf(e, n)
		addPlan(res, n.Name, p)
		switch p.kind {
		case planAdded:
			g := c.newGenerationLocked(n, 0)
			c.nets[n.Name] = &netEntry{serving: g}
			start = append(start, g)
		case planServing:
			if e.pending != nil {
				e.pending.retiring, e.pending = true, nil
			}
			e.serving.entry = n
		case planPending:
			e.pending.entry = n
		default:
			if e.pending != nil {
				e.pending.retiring = true
			}
			g := c.newGenerationLocked(n, 0)
			if e.serving.spec.Image == nil {
				// It never ran: nothing to keep serving while the new one
				// starts.
				e.serving.retiring, e.serving, e.pending = true, g, nil
			} else {
				e.pending = g
			}
			start = append(start, g)
		}
	}
	for name, e := range c.nets {
		if _, ok := cfg.Network(name); ok {
			continue
		}
		e.serving.retiring = true
		if e.pending != nil {
			e.pending.retiring = true
		}
		delete(c.nets, name)
		res.Retired = append(res.Retired, name)
	}
	slices.Sort(res.Retired)
	c.cfg = cfg
	c.mu.Unlock()
	for _, g := range start {
		c.record(g)
	}
	return res, start
}
