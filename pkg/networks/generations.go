package networks

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/state"
)

// A generation is one plugin container of a network. A new generation
// starts when a network's image or plugin config changes (a reload, or a
// config edited while kurmad was down) and the older one is kept,
// retiring, until no attachment it served holds it any more: a del runs
// where its add ran. A network's generations share its plugin state dir.
//
// Until it has its image a generation is the Controller's alone (fetching,
// or failed with the reason and the next attempt); once it has one, the
// plugin host runs its container (started).
type generation struct {
	key   netplugin.Target
	def   string             // definition of the config entry it runs
	entry *netconfig.Network // that entry; nil for one kept only for journaled attachments
	spec  networkpod.Spec    // what the host runs; Image is nil until it has one
	// storedImage is the image of its journal record when the config
	// entry got the same generation again at boot (attached: journaled
	// attachments use it): a fetch that brings another image must not
	// replace it under them.
	storedImage string
	attached    bool
	retiring    bool
	// until, for a retiring generation a kurmad before this one left
	// running, is its network's new generation: it stops once that one's
	// plugin is ready (or once its pods are gone, if later), as a reload
	// replaces a generation.
	until *generation
	// checking: it runs from the image its journal record names, and its
	// URI is fetched beside it; another image there replaces it with a new
	// generation (fetched).
	checking bool
	// holders are the holders (pods, a gc owed) of references to it: a
	// retiring generation stops once it has none.
	holders map[string]struct{}

	// started: the host runs its container. Set, and the container
	// started or removed, under startMu, so that a removal never misses a
	// start under way.
	started bool
	dropped bool // picked by stopRetired: never held or started any more
	startMu sync.Mutex

	// While it waits for its image: fetching, or failed with reason (and
	// the next attempt, for a fetch that failed), since then.
	waiting   string
	reason    string
	since     time.Time
	nextRetry time.Time
	// cancelFetch stops the fetch of its image; retryFetch makes it try
	// again now (kurmactl net retry). Both nil when nothing is fetched.
	cancelFetch context.CancelFunc
	retryFetch  chan struct{}
	fetch       fetchProgress // its image's, for net ls
}

// netEntry is one network of the config.
type netEntry struct {
	serving *generation // new pods attach through it
	pending *generation // a newer generation that replaces serving once it runs
}

// Fetches that failed are tried again after fetchRetryBase, doubling up to
// fetchRetryMax.
const (
	fetchRetryBase = time.Second
	fetchRetryMax  = 5 * time.Minute
)

// definition is the hash of config entry n's definition (see
// gendef.Definition.Hash): what it asks its container to run. Two entries
// with the same definition are served by the same generation. What
// kurmad reads only when it attaches a pod (default, containerInterface,
// network_policy) is not part of it.
func definition(n *netconfig.Network) (string, error) { return n.Hash() }

// Definition is the definition of config entry n (see definition): the
// journaled generation of the same definition serves n again after a
// restart.
func Definition(n *netconfig.Network) string {
	def, _ := definition(n)
	return def
}

// newGeneration is a generation of key with spec, waiting (fetching).
func newGeneration(key netplugin.Target, spec networkpod.Spec) *generation {
	return &generation{key: key, spec: spec, holders: map[string]struct{}{}, waiting: StateFetching, since: time.Now()}
}

// newGenerationLocked makes generation gen of config entry n (0: the next
// number of its network); c.mu is held. Its record is for the caller to
// journal (record).
func (c *Controller) newGenerationLocked(n *netconfig.Network, gen int) *generation {
	if gen == 0 {
		gen = c.lastGen[n.Name] + 1
	}
	c.lastGen[n.Name] = max(c.lastGen[n.Name], gen)
	key := netplugin.Target{Network: n.Name, Generation: gen}
	g := newGeneration(key, networkpod.Spec{Network: n.Name, Generation: gen, Definition: n.Definition})
	g.entry = n
	def, err := definition(n)
	g.def = def
	if err != nil {
		g.fail(err, time.Time{})
	}
	c.gens[key] = g
	return g
}

// fail shows g, waiting for its image, failed with err, tried again at
// retry (zero: not tried again); c.mu is held or g not yet shared.
func (g *generation) fail(err error, retry time.Time) {
	g.waiting, g.reason, g.since, g.nextRetry = StateFailed, err.Error(), time.Now(), retry
}

// record journals what g runs, so that a restarted kurmad can run it
// again for its attachments' dels, or give its entry the same generation.
func (c *Controller) record(g *generation) {
	c.mu.Lock()
	rec := &state.Generation{Network: g.key.Network, Generation: g.key.Generation, Hash: g.def, Definition: g.spec.Definition}
	c.mu.Unlock()
	if err := c.opts.Store.PutGeneration(rec); err != nil {
		c.log.WithFields(logrus.Fields{"network": g.key.Network, "generation": g.key.Generation}).WithError(err).
			Error("cannot journal the generation: a restart will start it anew")
	}
}

// journaled is what the journal's pods hold of one generation: the
// holders (pod IDs) of its attachments whose del has not succeeded, and
// the image and config snapshot of the newest of them.
type journaled struct {
	holders map[string]struct{}
	image   string
	config  []byte
}

// journaledGenerations reads, from the journal's pods, the generations
// their attachments hold (see journaled).
func (c *Controller) journaledGenerations() (map[netplugin.Target]*journaled, error) {
	pods, err := c.opts.Store.ListPods()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	out := map[netplugin.Target]*journaled{}
	for _, p := range pods { // oldest first: the newest snapshot is kept
		for _, a := range p.Attachments {
			if a.Deleted {
				continue
			}
			k := netplugin.Target{Network: a.Network, Generation: a.Generation}
			j := out[k]
			if j == nil {
				j = &journaled{holders: map[string]struct{}{}}
				out[k] = j
			}
			j.holders[p.ID] = struct{}{}
			j.image, j.config = a.Image, a.Config
		}
	}
	return out, nil
}

// planBoot makes the generations of the boot: one per config network (the
// journaled generation of the same definition, else a new one), and one,
// retiring, for every other generation journaled attachments still hold,
// run from its journal record (or, for attachments of a kurmad without
// generations, from their newest snapshot). Each is held by the pods whose
// journaled attachments it served. Records nothing uses go.
func (c *Controller) planBoot() ([]*generation, error) {
	records, err := c.opts.Store.Generations()
	if err != nil {
		return nil, err
	}
	refs, err := c.journaledGenerations()
	if err != nil {
		return nil, err
	}
	byKey := map[netplugin.Target]*state.Generation{}
	for _, r := range records {
		k := netplugin.Target{Network: r.Network, Generation: r.Generation}
		byKey[k] = r
		c.lastGen[r.Network] = max(c.lastGen[r.Network], r.Generation)
	}
	for k := range refs {
		c.lastGen[k.Network] = max(c.lastGen[k.Network], k.Generation)
	}
	survivors, err := c.host.Survivors()
	if err != nil {
		return nil, err
	}
	var gens, adopted []*generation
	c.mu.Lock()
	for _, n := range c.cfg.Networks {
		g := c.newGenerationLocked(n, sameDefinition(records, n.Name, Definition(n), n.WrittenHash()))
		if r := byKey[g.key]; r != nil {
			g.storedImage = gendef.IDOf(r.Image)
			// Its image is in the store: it starts now (a container a
			// kurmad before this one left running is adopted), and its
			// URI is fetched beside it, in case it brings another.
			if img, err := c.opts.Fetcher.Get(g.storedImage); g.storedImage != "" && err == nil {
				g.spec.Image, g.checking = img.Runnable(), true
			}
			if r.Hash != g.def {
				adopted = append(adopted, g) // journaled by an earlier kurma: its record gets today's definition
			}
		}
		if j := refs[g.key]; j != nil {
			g.attached, g.holders = true, j.holders
		}
		c.nets[n.Name] = &netEntry{serving: g}
		gens = append(gens, g)
	}
	for k, j := range refs {
		if c.gens[k] == nil {
			gens = append(gens, c.journaledGenerationLocked(k, byKey[k], j))
		}
	}
	// A network's generation a kurmad before this one left running whose
	// definition changed meanwhile runs on, retiring, until the network's
	// new generation is ready: as a reload replaces it.
	for _, sv := range survivors {
		k := netplugin.Target{Network: sv.Network, Generation: sv.Generation}
		e, r := c.nets[sv.Network], byKey[k]
		if c.gens[k] != nil || e == nil || r == nil {
			continue
		}
		g := c.journaledGenerationLocked(k, r, &journaled{holders: map[string]struct{}{}})
		g.until = e.serving
		gens = append(gens, g)
	}
	c.mu.Unlock()
	// The others go: no generation of this kurmad's runs them.
	c.host.Prune(func(network string, gen int) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		g := c.gens[netplugin.Target{Network: network, Generation: gen}]
		return g != nil && g.spec.Image != nil
	})
	for _, r := range records {
		if k := (netplugin.Target{Network: r.Network, Generation: r.Generation}); c.gens[k] == nil {
			_ = c.opts.Store.DeleteGeneration(r.Network, r.Generation)
		}
	}
	for _, g := range gens {
		if g.entry != nil && (byKey[g.key] == nil || slices.Contains(adopted, g)) {
			c.record(g)
		}
	}
	sort.SliceStable(gens, func(i, j int) bool { return gens[i].entry != nil && gens[j].entry == nil })
	return gens, nil
}

// sameDefinition is the newest journaled generation of network whose
// definition is one of defs (today's, and the one an earlier kurma
// journaled for the same entry), 0 when there is none.
func sameDefinition(records []*state.Generation, network string, defs ...string) int {
	gen := 0
	for _, r := range records {
		if r.Network == network && r.Hash != "" && slices.Contains(defs, r.Hash) {
			gen = max(gen, r.Generation)
		}
	}
	return gen
}

// journaledGenerationLocked is a retiring generation for the attachments
// journaled as served by k, run from its record's image and config, or,
// without a record, from the newest attachment's snapshot (j).
func (c *Controller) journaledGenerationLocked(k netplugin.Target, rec *state.Generation, j *journaled) *generation {
	g := newGeneration(k, networkpod.Spec{Network: k.Network, Generation: k.Generation, Definition: gendef.Definition{Config: j.config}})
	g.retiring, g.attached, g.holders = true, true, j.holders
	imageID := j.image
	if rec != nil {
		imageID, g.def, g.spec.Definition = gendef.IDOf(rec.Image), rec.Hash, rec.Definition
	}
	log := c.log.WithFields(logrus.Fields{"network": k.Network, "generation": k.Generation, "image": imageID})
	if img, err := c.opts.Fetcher.Get(imageID); err != nil {
		g.fail(fmt.Errorf("generation %d is gone from the config and its image %s is gone from the store: %w", k.Generation, imageID, err), time.Time{})
		log.WithError(err).Error("pods attached through a generation gone from the config cannot be torn down")
		log.WithField("reason", g.reason).Error("generation cannot start")
	} else {
		g.spec.Image = img.Runnable()
		log.Warn("generation gone from the config: running it from its journaled record until its pods are deleted")
	}
	c.gens[k] = g
	return g
}

// startGenerations starts the containers of those of gs that have their
// image (see networkpod.Host.Start: it returns once each had its first
// start attempt) and fetches the images of the config's that have none.
func (c *Controller) startGenerations(ctx context.Context, gs []*generation) error {
	var ready []*generation
	for _, g := range gs {
		switch {
		case g.spec.Image != nil:
			ready = append(ready, g)
			if g.checking {
				c.startFetch(g)
			}
		case g.entry != nil && g.waiting == StateFetching:
			c.startFetch(g)
		}
	}
	return c.startContainers(ctx, ready)
}

// startContainers has the host run the containers of gs, each with its
// image, but those stopRetired forgot meanwhile.
func (c *Controller) startContainers(ctx context.Context, gs []*generation) error {
	var specs []networkpod.Spec
	var locked []*generation
	defer func() {
		for _, g := range locked {
			g.startMu.Unlock()
		}
	}()
	for _, g := range gs {
		g.startMu.Lock()
		locked = append(locked, g)
		c.mu.Lock()
		if !g.dropped && !g.started {
			g.started = true
			specs = append(specs, g.spec)
		}
		c.mu.Unlock()
	}
	return c.host.Start(ctx, specs)
}

// fetchOptions are the fetch options of config entry n's image: its verify
// mode and image name, and consent to an unchecked plain http:// image
// only when the entry itself says "verify": "none".
func fetchOptions(n *netconfig.Network) []imagefetch.FetchOption {
	opts := []imagefetch.FetchOption{imagefetch.WithVerify(imagefetch.Verify(n.Verify)), imagefetch.WithImageName(n.ImageName)}
	if n.VerifyByEntry && n.Verify == netconfig.VerifyNone {
		opts = append(opts, imagefetch.WithPlainHTTPConsent())
	}
	return opts
}

// startFetch fetches g's image in the background, until it has it.
func (c *Controller) startFetch(g *generation) {
	ctx, cancel := context.WithCancel(c.runCtx)
	c.mu.Lock()
	g.cancelFetch, g.retryFetch = cancel, make(chan struct{}, 1)
	waits, spec := !g.checking, g.spec
	c.mu.Unlock()
	if waits {
		// Its container waits for this fetch: what its start needs and
		// the image does not is made meanwhile (on a cold boot, beside
		// the image's import). A start makes what this did not.
		c.background(func() {
			if err := c.host.Prepare(spec); err != nil {
				c.log.WithError(err).WithField("network", spec.Network).Debug("preparing the network's container while its image is fetched")
			}
		})
	}
	c.background(func() {
		defer cancel()
		c.fetchLoop(ctx, g)
	})
}

// fetchLoop fetches g's image, trying again after a failure with backoff
// (fetchRetryBase doubling to fetchRetryMax, or at once on a retry), and
// hands it over (fetched) once it has it.
func (c *Controller) fetchLoop(ctx context.Context, g *generation) {
	n := g.entry
	log := c.log.WithFields(logrus.Fields{"network": n.Name, "generation": g.key.Generation, "image": n.ImageURI})
	for failures := 0; ; failures++ {
		start := time.Now()
		g.fetch.begin()
		img, err := c.opts.Fetcher.Fetch(ctx, n.ImageURI, append(fetchOptions(n), g.fetch.option())...)
		if ctx.Err() != nil {
			return
		}
		if c.opts.OnFetch != nil {
			c.opts.OnFetch(n.Name, err == nil, time.Since(start))
		}
		if err == nil {
			log.WithFields(logrus.Fields{"image": img.ID, "duration": time.Since(start).Round(time.Millisecond)}).Info("image ready")
			c.fetched(ctx, g, img)
			return
		}
		delay := min(fetchRetryBase<<min(failures, 30), fetchRetryMax)
		next := time.Now().Add(delay)
		log.WithError(err).WithField("retry_at", next.UTC().Format(time.RFC3339)).Error("image fetch failed")
		c.mu.Lock()
		g.fail(err, next)
		c.mu.Unlock()
		c.changed()
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-g.retryFetch:
			t.Stop()
		case <-t.C:
		}
		c.mu.Lock()
		g.waiting, g.reason, g.since, g.nextRetry = StateFetching, "", time.Now(), time.Time{}
		c.mu.Unlock()
		c.changed()
	}
}

// fetched gives g its image: its container starts. At boot, a generation
// given again to an unchanged entry whose image changed behind its URI
// keeps the image its attachments were made with, and the new image
// becomes a new generation that replaces it once it runs.
func (c *Controller) fetched(ctx context.Context, g *generation, img *imagefetch.Image) {
	c.mu.Lock()
	if g.checking {
		g.checking = false
		same := g.spec.Image.ID == img.ID
		c.mu.Unlock()
		if !same {
			c.imageChanged(ctx, g, img)
		}
		return
	}
	if g.attached && g.storedImage != "" && img.ID != g.storedImage && g.spec.Image == nil {
		c.mu.Unlock()
		c.imageChangedAtBoot(ctx, g, img)
		return
	}
	g.spec.Image = img.Runnable()
	c.mu.Unlock()
	c.record(g)
	// The route names the image before its container can report running:
	// a pod attached as soon as it runs records the image it ran with.
	c.publish()
	if err := c.startContainers(ctx, []*generation{g}); err != nil {
		c.log.WithError(err).Error("starting a generation with its image")
	}
	c.publish()
}

// imageChangedAtBoot runs g from the image its record names, for the dels
// of its attachments, and img as a new generation.
func (c *Controller) imageChangedAtBoot(ctx context.Context, g *generation, img *imagefetch.Image) {
	log := c.log.WithFields(logrus.Fields{"network": g.key.Network, "generation": g.key.Generation, "image": img.ID, "was": g.storedImage})
	log.Warn("the network's image changed since the last run: its pods keep the old one, new pods get the new one in a new generation")
	old, err := c.opts.Fetcher.Get(g.storedImage)
	c.mu.Lock()
	e := c.nets[g.key.Network]
	if err == nil {
		g.spec.Image = old.Runnable()
	} else {
		g.fail(fmt.Errorf("its image %s is gone from the store: %w", g.storedImage, err), time.Time{})
	}
	var ng *generation
	if e != nil && e.serving == g {
		ng = c.newGenerationLocked(g.entry, 0)
		ng.spec.Image = img.Runnable()
		e.pending = ng
	}
	c.mu.Unlock()
	if err == nil {
		if err := c.startContainers(ctx, []*generation{g}); err != nil {
			log.WithError(err).Error("starting the generation with its journaled image")
		}
	}
	if ng != nil {
		c.record(ng)
		if err := c.startGenerations(ctx, []*generation{ng}); err != nil {
			log.WithError(err).Error("starting the new generation")
		}
	}
	c.publish()
}

// imageChanged makes img, fetched from the URI of g's entry while g runs
// from its journaled image, a new generation of g's network, which
// replaces g once it runs, as a reload would.
func (c *Controller) imageChanged(ctx context.Context, g *generation, img *imagefetch.Image) {
	log := c.log.WithFields(logrus.Fields{"network": g.key.Network, "generation": g.key.Generation, "image": img.ID, "was": g.spec.Image.ID})
	c.mu.Lock()
	e := c.nets[g.key.Network]
	if e == nil || e.serving != g || e.pending != nil {
		c.mu.Unlock()
		return // replaced or retired meanwhile
	}
	ng := c.newGenerationLocked(g.entry, 0)
	ng.spec.Image = img.Runnable()
	e.pending = ng
	c.mu.Unlock()
	log.Warn("the network's image changed since the last run: a new generation replaces the one running, once it runs")
	c.record(ng)
	if err := c.startGenerations(ctx, []*generation{ng}); err != nil {
		log.WithError(err).Error("starting the new generation")
	}
	c.publish()
}
