package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
)

// A generation is one plugin container of a network. kurmad starts a new
// generation when a network's image or plugin config changes (a reload, or
// a config edited while kurmad was down) and keeps the older one, retiring,
// until the last attachment it served is deleted: a del runs where its add
// ran. A network's generations share its plugin state dir.
type generation struct {
	key   netplugin.Target
	def   string             // definition of the config entry it runs
	entry *netconfig.Network // that entry; nil for one kept only for journaled attachments
	spec  networkpod.Spec    // as started (without an image while it is fetched)
	image *imagefetch.Image  // nil until it has one
	// storedImage is the image of its journal record when the config
	// entry got the same generation again at boot (attached: journaled
	// attachments use it): a fetch that brings another image must not
	// replace it under them.
	storedImage string
	attached    bool
	retiring    bool
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

// definition identifies what a config entry asks its container to run:
// the image (URI, verification, name) and capabilities, and the plugin
// config the main executable gets. Two entries with the same definition
// are served by the same generation. It also returns that plugin config.
func definition(n *netconfig.Network) (string, []byte, error) {
	conf, err := n.PluginConfig(nil)
	if err != nil {
		return "", nil, err
	}
	caps := slices.Clone(n.AllowCapabilities)
	slices.Sort(caps)
	// The field names are part of the hash: ACI (the image URI, named
	// before "image" was) keeps every journaled generation's definition,
	// so an upgrade restarts no plugin container (TestDefinitionKept).
	def := struct {
		ACI, Verify, ImageName string
		Capabilities           []string
		Syscalls               []string `json:",omitempty"`
		Config                 []byte
		Kubernetes             bool `json:",omitempty"`
	}{n.ImageURI, n.Verify, n.ImageName, caps, slices.Sorted(slices.Values(n.AllowSyscalls)), conf, n.KubernetesCredentials}
	b, err := json.Marshal(def)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), conf, nil
}

// newGenerationLocked makes generation gen of config entry n (0: the next
// number of its network); d.mu is held. Its record is for the caller to
// journal (record).
func (d *Daemon) newGenerationLocked(n *netconfig.Network, gen int) *generation {
	if gen == 0 {
		gen = d.lastGen[n.Name] + 1
	}
	d.lastGen[n.Name] = max(d.lastGen[n.Name], gen)
	g := &generation{key: netplugin.Target{Network: n.Name, Generation: gen}, entry: n,
		spec: networkpod.Spec{Network: n.Name, Generation: gen, AllowCapabilities: n.AllowCapabilities, AllowSyscalls: n.AllowSyscalls,
			KubernetesCredentials: n.KubernetesCredentials}}
	def, conf, err := definition(n)
	g.def, g.spec.Config, g.spec.Err = def, conf, err
	d.gens[g.key] = g
	return g
}

// record journals what g runs, so that a restarted kurmad can run it
// again for its attachments' dels, or give its entry the same generation.
func (d *Daemon) record(g *generation) {
	rec := &state.Generation{Network: g.key.Network, Generation: g.key.Generation, Definition: g.def,
		Config: g.spec.Config, AllowCapabilities: g.spec.AllowCapabilities, AllowSyscalls: g.spec.AllowSyscalls,
		KubernetesCredentials: g.spec.KubernetesCredentials}
	if g.image != nil {
		rec.Image = g.image.ID
	}
	if err := d.store.PutGeneration(rec); err != nil {
		d.log.WithFields(logrus.Fields{"network": g.key.Network, "generation": g.key.Generation}).WithError(err).
			Error("cannot journal the generation: a restart will start it anew")
	}
}

// planBoot makes the generations of the boot: one per config network (the
// journaled generation of the same definition, else a new one), and one,
// retiring, for every other generation journaled attachments still use,
// run from its journal record (or, for attachments of a kurmad without
// generations, from their newest snapshot). Records nothing uses go.
func (d *Daemon) planBoot() ([]*generation, error) {
	records, err := d.store.Generations()
	if err != nil {
		return nil, err
	}
	journaled, err := d.store.AttachedGenerations()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	byKey := map[netplugin.Target]*state.Generation{}
	for _, r := range records {
		k := netplugin.Target{Network: r.Network, Generation: r.Generation}
		byKey[k] = r
		d.lastGen[r.Network] = max(d.lastGen[r.Network], r.Generation)
	}
	refs := map[netplugin.Target]*state.Generation{}
	for _, jg := range journaled {
		refs[netplugin.Target{Network: jg.Network, Generation: jg.Generation}] = jg
		d.lastGen[jg.Network] = max(d.lastGen[jg.Network], jg.Generation)
	}
	var gens []*generation
	d.mu.Lock()
	for _, n := range d.cfg.Networks {
		g := d.newGenerationLocked(n, sameDefinition(records, n.Name, definitionOf(n)))
		if r := byKey[g.key]; r != nil {
			g.storedImage = r.Image
		}
		_, g.attached = refs[g.key]
		d.nets[n.Name] = &netEntry{serving: g}
		gens = append(gens, g)
	}
	for k, jg := range refs {
		if d.gens[k] == nil {
			gens = append(gens, d.journaledGenerationLocked(k, byKey[k], jg))
		}
	}
	d.mu.Unlock()
	for _, r := range records {
		if k := (netplugin.Target{Network: r.Network, Generation: r.Generation}); d.gens[k] == nil {
			_ = d.store.DeleteGeneration(r.Network, r.Generation)
		}
	}
	for _, g := range gens {
		if g.entry != nil && byKey[g.key] == nil {
			d.record(g)
		}
	}
	sort.SliceStable(gens, func(i, j int) bool { return gens[i].entry != nil && gens[j].entry == nil })
	return gens, nil
}

func definitionOf(n *netconfig.Network) string {
	def, _, _ := definition(n)
	return def
}

// sameDefinition is the newest journaled generation of network whose
// definition is def, 0 when there is none.
func sameDefinition(records []*state.Generation, network, def string) int {
	gen := 0
	for _, r := range records {
		if r.Network == network && r.Definition == def && def != "" {
			gen = max(gen, r.Generation)
		}
	}
	return gen
}

// journaledGenerationLocked is a retiring generation for the attachments
// journaled as served by k, run from its record's image and config, or,
// without a record, from the newest attachment's snapshot (attached).
func (d *Daemon) journaledGenerationLocked(k netplugin.Target, rec, attached *state.Generation) *generation {
	g := &generation{key: k, retiring: true, attached: true,
		spec: networkpod.Spec{Network: k.Network, Generation: k.Generation, Config: attached.Config}}
	imageID := attached.Image
	if rec != nil {
		imageID, g.def = rec.Image, rec.Definition
		g.spec.Config, g.spec.AllowCapabilities, g.spec.AllowSyscalls = rec.Config, rec.AllowCapabilities, rec.AllowSyscalls
		g.spec.KubernetesCredentials = rec.KubernetesCredentials
	}
	log := d.log.WithFields(logrus.Fields{"network": k.Network, "generation": k.Generation, "image": imageID})
	if img, err := d.fetcher.Get(imageID); err != nil {
		g.spec.Err = fmt.Errorf("generation %d is gone from the config and its image %s is gone from the store: %w", k.Generation, imageID, err)
		log.WithError(err).Error("pods attached through a generation gone from the config cannot be torn down")
	} else {
		g.image, g.spec.Image = img, img
		log.Warn("generation gone from the config: running it from its journaled record until its pods are deleted")
	}
	d.gens[k] = g
	return g
}

// startGenerations starts gs' containers (see networkpod.Host.Start:
// it returns once each had its first start attempt, or waits for its
// image) and fetches the images of those that have none.
func (d *Daemon) startGenerations(ctx context.Context, gs []*generation) error {
	specs := make([]networkpod.Spec, 0, len(gs))
	for _, g := range gs {
		specs = append(specs, g.spec)
	}
	if err := d.host.Start(ctx, specs); err != nil {
		return err
	}
	for _, g := range gs {
		if g.image == nil && g.spec.Err == nil && g.entry != nil {
			d.startFetch(g)
		}
	}
	return nil
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
func (d *Daemon) startFetch(g *generation) {
	ctx, cancel := context.WithCancel(d.runCtx)
	d.mu.Lock()
	g.cancelFetch, g.retryFetch = cancel, make(chan struct{}, 1)
	d.mu.Unlock()
	d.background(func() {
		defer cancel()
		d.fetchLoop(ctx, g)
	})
}

// fetchLoop fetches g's image, trying again after a failure with backoff
// (fetchRetryBase doubling to fetchRetryMax, or at once on a retry), and
// hands it over (fetched) once it has it.
func (d *Daemon) fetchLoop(ctx context.Context, g *generation) {
	n := g.entry
	log := d.log.WithFields(logrus.Fields{"network": n.Name, "generation": g.key.Generation, "image": n.ImageURI})
	for failures := 0; ; failures++ {
		start := time.Now()
		g.fetch.begin()
		img, err := d.fetcher.Fetch(ctx, n.ImageURI, append(fetchOptions(n), g.fetch.option())...)
		if ctx.Err() != nil {
			return
		}
		d.metrics.ObserveFetch(n.Name, err == nil, time.Since(start))
		if err == nil {
			log.WithFields(logrus.Fields{"image": img.ID, "duration": time.Since(start).Round(time.Millisecond)}).Info("image ready")
			d.fetched(ctx, g, img)
			return
		}
		delay := min(fetchRetryBase<<min(failures, 30), fetchRetryMax)
		next := time.Now().Add(delay)
		log.WithError(err).WithField("retry_at", next.UTC().Format(time.RFC3339)).Error("image fetch failed")
		d.host.FetchFailed(n.Name, g.key.Generation, err, next)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-g.retryFetch:
			t.Stop()
		case <-t.C:
		}
		d.host.Fetching(n.Name, g.key.Generation)
	}
}

// fetched gives g its image: its container starts. At boot, a generation
// given again to an unchanged entry whose image changed behind its URI
// keeps the image its attachments were made with, and the new image
// becomes a new generation that replaces it once it runs.
func (d *Daemon) fetched(ctx context.Context, g *generation, img *imagefetch.Image) {
	d.mu.Lock()
	if g.attached && g.storedImage != "" && img.ID != g.storedImage && g.image == nil {
		d.mu.Unlock()
		d.imageChangedAtBoot(ctx, g, img)
		return
	}
	g.image = img
	d.mu.Unlock()
	d.record(g)
	if err := d.host.Provide(g.key.Network, g.key.Generation, img); err != nil {
		d.log.WithError(err).Error("handing a network its image")
	}
	d.updateView()
}

// imageChangedAtBoot runs g from the image its record names, for the dels
// of its attachments, and img as a new generation.
func (d *Daemon) imageChangedAtBoot(ctx context.Context, g *generation, img *imagefetch.Image) {
	log := d.log.WithFields(logrus.Fields{"network": g.key.Network, "generation": g.key.Generation, "image": img.ID, "was": g.storedImage})
	log.Warn("the network's image changed since the last run: its pods keep the old one, new pods get the new one in a new generation")
	old, err := d.fetcher.Get(g.storedImage)
	d.mu.Lock()
	e := d.nets[g.key.Network]
	if err == nil {
		g.image = old
	}
	var ng *generation
	if e != nil && e.serving == g {
		ng = d.newGenerationLocked(g.entry, 0)
		ng.image, ng.spec.Image = img, img
		e.pending = ng
	}
	d.mu.Unlock()
	if err != nil {
		d.host.FetchFailed(g.key.Network, g.key.Generation,
			fmt.Errorf("its image %s is gone from the store: %w", g.storedImage, err), time.Time{})
	} else if err := d.host.Provide(g.key.Network, g.key.Generation, old); err != nil {
		log.WithError(err).Error("handing a network its image")
	}
	if ng != nil {
		d.record(ng)
		if err := d.startGenerations(ctx, []*generation{ng}); err != nil {
			log.WithError(err).Error("starting the new generation")
		}
	}
}

// onState is networkpod's OnState: a generation whose container starts
// running (its plugin ready or not) may be waited for by dels and gcs
// (Kick); one whose plugin is ready may replace its network's serving
// generation. A new generation whose status says it cannot serve adds
// does not: the old one serves on until the new one's plugin is ready.
func (d *Daemon) onState(network string, gen int, st string) {
	if st != networkpod.StateRunning && st != networkpod.StateUnavailable {
		return
	}
	d.background(func() {
		d.generationRunning(netplugin.Target{Network: network, Generation: gen}, st == networkpod.StateRunning)
	})
}

func (d *Daemon) generationRunning(k netplugin.Target, ready bool) {
	if d.pods != nil {
		d.pods.Kick()
	}
	if !ready {
		return
	}
	d.mu.Lock()
	e := d.nets[k.Network]
	switched := e != nil && e.pending != nil && e.pending.key == k
	if switched {
		old := e.serving
		e.serving, e.pending = e.pending, nil
		old.retiring = true
		d.log.WithFields(logrus.Fields{"network": k.Network, "generation": k.Generation, "retiring": old.key.Generation}).
			Info("new generation serves new pods; the old one retires once its pods are gone")
	}
	d.mu.Unlock()
	if switched {
		d.updateView()
		d.collect()
	}
}

// updateView tells podnet what new pods attach to: the config's networks,
// each as its serving generation's entry says, through that generation.
func (d *Daemon) updateView() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pods == nil {
		return
	}
	cfg := *d.cfg
	cfg.Networks = make([]*netconfig.Network, 0, len(d.cfg.Networks))
	serving := map[string]podnet.Serving{}
	for _, n := range d.cfg.Networks {
		g := d.nets[n.Name].serving
		cfg.Networks = append(cfg.Networks, g.entry)
		s := podnet.Serving{Generation: g.key.Generation}
		if g.image != nil {
			s.Image = g.image.ID
		}
		serving[n.Name] = s
	}
	d.pods.SetNetworks(&cfg, serving)
}

// collect stops the retiring generations no pod needs any more (see
// podnet.Manager.InUse) and forgets them.
func (d *Daemon) collect() {
	d.collectMu.Lock()
	defer d.collectMu.Unlock()
	if !d.hasRetiring() || d.pods == nil {
		return
	}
	use, err := d.pods.InUse()
	if err != nil {
		d.log.WithError(err).Error("cannot tell which generations pods use")
		return
	}
	var drop []*generation
	d.mu.Lock()
	for k, g := range d.gens {
		if g.retiring && !use[k] {
			drop = append(drop, g)
			delete(d.gens, k)
		}
	}
	d.mu.Unlock()
	for _, g := range drop {
		if g.cancelFetch != nil {
			g.cancelFetch()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := d.host.Remove(ctx, g.key.Network, g.key.Generation)
		cancel()
		log := d.log.WithFields(logrus.Fields{"network": g.key.Network, "generation": g.key.Generation})
		if err != nil {
			log.WithError(err).Error("stopping a retired generation")
		}
		if err := d.store.DeleteGeneration(g.key.Network, g.key.Generation); err != nil {
			log.WithError(err).Error("forgetting a retired generation")
		}
		log.Info("retired generation stopped: no pod uses it any more")
	}
}

func (d *Daemon) hasRetiring() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range d.gens {
		if g.retiring {
			return true
		}
	}
	return false
}
