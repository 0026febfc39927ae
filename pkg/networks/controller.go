// Package networks owns kurmad's networks and their generations: which
// generation of each config network serves new pods, the boot plan (the
// config's networks, and the generations journaled pods still hold), the
// diff a reload applies, the fetch of each generation's image with its
// retries, the generation records of the journal, and the plugin host
// (pkg/networkpod) that runs their containers.
//
// The pod lifecycle (pkg/podnet) asks it where a network's new attachments
// go (Serving) and holds references to the generations its attachments use
// (Retain, Release): a retiring generation stops once nothing holds it.
// Nothing here calls into podnet; podnet waits on Started to retry what
// waited for a container.
package networks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/state"
)

// Options configure a Controller.
type Options struct {
	// Config is the boot config (Apply replaces it).
	Config *netconfig.Config
	// Store is the journal: the generation records, and the pods'
	// attachments that hold generations at boot.
	Store *state.Store
	// Fetcher fetches the images and gets journaled generations' from the
	// store.
	Fetcher *imagefetch.Fetcher
	// Host configures the plugin host the Controller runs; its OnState is
	// the Controller's.
	Host networkpod.Options
	// OnFetch, when set, hears every fetch of a generation's image once it
	// ended (metrics). It must be quick.
	OnFetch func(network string, ok bool, d time.Duration)
	Logger  logrus.FieldLogger
}

// Controller is the one owner of the networks and their generations.
type Controller struct {
	opts Options
	log  logrus.FieldLogger
	host *networkpod.Host

	runCtx context.Context // Start's: fetches end with it
	cancel context.CancelFunc
	bgMu   sync.Mutex // orders background's Add before Stop's Wait
	bgDone bool
	bg     sync.WaitGroup

	retireMu sync.Mutex // one stopRetired at a time
	mu       sync.Mutex // guards what follows
	cfg      *netconfig.Config
	nets     map[string]*netEntry             // the config's networks
	gens     map[netplugin.Target]*generation // every generation, running or waiting for its image
	lastGen  map[string]int                   // highest generation number each network had
	started  chan struct{}                    // closed (and replaced) when a generation starts running

	serving atomic.Pointer[servingView] // what new pods attach to (publish)
	rev     revision                    // bumped at each change of Generations' list
}

// New makes a Controller and its plugin host; it starts nothing.
func New(opts Options) (*Controller, error) {
	switch {
	case opts.Config == nil:
		return nil, errors.New("networks: no config")
	case opts.Store == nil || opts.Fetcher == nil:
		return nil, errors.New("networks: a journal and an image store are required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.StandardLogger()
	}
	c := &Controller{opts: opts, log: opts.Logger, cfg: opts.Config, nets: map[string]*netEntry{},
		gens: map[netplugin.Target]*generation{}, lastGen: map[string]int{}, started: make(chan struct{})}
	c.runCtx, c.cancel = context.WithCancel(context.Background())
	hopts := opts.Host
	hopts.OnState = c.onState
	h, err := networkpod.New(hopts)
	if err != nil {
		return nil, err
	}
	c.host = h
	c.publish()
	return c, nil
}

// Start plans the boot's generations (see planBoot) and starts them: the
// containers of those that have their image (retiring generations of
// journaled pods) before it returns, each after its first start attempt;
// the config's fetch their images in the background, retried with backoff
// (a generation shows fetching, or failed with the reason and the next
// attempt), and start once they have them. Each one's status is probed
// once it runs (unavailable while its plugin says it cannot serve adds).
// ctx bounds the wait for the first starts; the fetches run until Stop.
func (c *Controller) Start(ctx context.Context) error {
	gens, err := c.planBoot()
	if err != nil {
		return err
	}
	c.publish()
	if err := c.startGenerations(ctx, gens); err != nil {
		return fmt.Errorf("plugin host: %w", err)
	}
	return nil
}

// NetnsDir is where pods' network namespaces are bind-mounted: visible in
// every plugin container at the same path (see networkpod.Host.NetnsDir).
func (c *Controller) NetnsDir() string { return c.host.NetnsDir() }

// Config is the config as last applied (at boot or by Apply).
func (c *Controller) Config() *netconfig.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// Stop ends the fetches and the Controller's background work, then stops
// every plugin container (see networkpod.Host.Stop). Stop is final.
func (c *Controller) Stop(ctx context.Context) error {
	c.stopBackground()
	return c.host.Stop(ctx)
}

// Detach ends the fetches and the Controller's background work, and
// leaves the plugin containers running for the next kurmad to adopt (see
// networkpod.Host.Detach). Detach is final, as Stop is.
func (c *Controller) Detach(ctx context.Context) error {
	c.stopBackground()
	return c.host.Detach(ctx)
}

func (c *Controller) stopBackground() {
	c.bgMu.Lock()
	c.bgDone = true
	c.bgMu.Unlock()
	c.cancel()
	c.bg.Wait()
}

// background runs fn in a goroutine Stop waits for; once Stop began, it
// runs nothing.
func (c *Controller) background(fn func()) {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgDone {
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		fn()
	}()
}

// onState is the host's OnState: a generation whose container starts
// running (its plugin ready or not) may be waited for by dels and gcs
// (Started); one whose plugin is ready may replace its network's serving
// generation. A new generation whose status says it cannot serve adds
// does not: the old one serves on until the new one's plugin is ready.
func (c *Controller) onState(network string, gen int, st string) {
	c.changed()
	if st != networkpod.StateRunning && st != networkpod.StateUnavailable {
		return
	}
	c.background(func() {
		c.generationRunning(netplugin.Target{Network: network, Generation: gen}, st == networkpod.StateRunning)
	})
}

func (c *Controller) generationRunning(k netplugin.Target, ready bool) {
	c.mu.Lock()
	close(c.started)
	c.started = make(chan struct{})
	if !ready {
		c.mu.Unlock()
		return
	}
	e := c.nets[k.Network]
	switched := e != nil && e.pending != nil && e.pending.key == k
	if switched {
		old := e.serving
		e.serving, e.pending = e.pending, nil
		old.retiring = true
		c.log.WithFields(logrus.Fields{"network": k.Network, "generation": k.Generation, "retiring": old.key.Generation}).
			Info("new generation serves new pods; the old one retires once its pods are gone")
	}
	awaited := false
	for _, g := range c.gens {
		if g.until != nil && g.until.key == k {
			g.until = nil
			awaited = true
		}
	}
	c.mu.Unlock()
	if switched {
		c.publish()
	}
	if switched || awaited {
		c.stopRetired()
	}
}

// Started returns a channel closed once a generation's container starts
// running (its plugin ready or not) after the call: what dels and gcs that
// wait for one (netplugin.ErrUnavailable) wait for.
func (c *Controller) Started() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// stopRetired stops the retiring generations nothing holds and forgets them:
// their containers go, then their journal records, and only then are they
// no longer listed. From the moment it picks one, nothing can hold it again
// (Retain fails: it is dropped).
func (c *Controller) stopRetired() {
	c.retireMu.Lock()
	defer c.retireMu.Unlock()
	var drop []*generation
	c.mu.Lock()
	for _, g := range c.gens {
		if g.retiring && len(g.holders) == 0 && !g.dropped && g.until == nil {
			drop = append(drop, g)
			g.dropped = true
		}
	}
	c.mu.Unlock()
	for _, g := range drop {
		if g.cancelFetch != nil {
			g.cancelFetch()
		}
		log := c.log.WithFields(logrus.Fields{"network": g.key.Network, "generation": g.key.Generation})
		g.startMu.Lock()
		if g.started {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := c.host.Remove(ctx, g.key.Network, g.key.Generation); err != nil {
				log.WithError(err).Error("stopping a retired generation")
			}
			cancel()
		}
		g.startMu.Unlock()
		if err := c.opts.Store.DeleteGeneration(g.key.Network, g.key.Generation); err != nil {
			log.WithError(err).Error("forgetting a retired generation")
		}
		c.mu.Lock()
		delete(c.gens, g.key)
		c.mu.Unlock()
		c.changed()
		log.Info("retired generation stopped: no pod uses it any more")
	}
}
