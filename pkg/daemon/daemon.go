// Package daemon is kurmad: it wires one of each part (the journal, the
// image store, the plugin containers, the pod lifecycle and the API), boots
// them in order and serves the API until its context ends. cmd/kurmad holds
// only what a process needs around it: flags, the logger, signals and the
// libcontainer init hook.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/metrics"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
	"github.com/kurma-project/kurma/pkg/transcript"
)

// shutdownGrace is how long requests in flight may run on after the
// daemon is told to stop.
const shutdownGrace = 30 * time.Second

// Options configure a Daemon.
type Options struct {
	// Config is the loaded and validated boot config, with any command-line
	// overrides applied. Required.
	Config *netconfig.Config
	// ConfigPath is the file Config was loaded from, which Reload reads
	// again; "" → Config.Path. A daemon without one cannot reload.
	ConfigPath string
	// StateDir and RunDir are command-line overrides of the config's
	// state_dir and run_dir: applied to every config Reload reads, as to
	// Config.
	StateDir, RunDir string
	// Socket is the API socket; "" → <run_dir>/kurmad.sock.
	Socket string
	// Version is what GET /v1/info reports (kurmad's is set at build time).
	Version string
	// Logger receives the daemon's log; every part adds its own "component"
	// field. nil → the logrus standard logger.
	Logger logrus.FieldLogger
}

// Daemon is one kurmad over one state dir and one run dir.
type Daemon struct {
	opts Options
	log  logrus.FieldLogger
	// agentPath is the kurma-agent binary; "" → networkpod's default, beside
	// the executable. Tests, whose executable is the test binary, set it.
	agentPath string

	started time.Time
	runCtx  context.Context // Run's: background work ends with it
	bgMu    sync.Mutex      // orders background's Add before Run's Wait
	bgDone  bool            // Run waits: no more background work
	bg      sync.WaitGroup  // background work Run waits for before it returns
	store   *state.Store
	fetcher *imagefetch.Fetcher
	host    *networkpod.Host
	pods    *podnet.Manager
	// transcripts keeps each pod's last plugin calls; metrics is nil when
	// metrics_listen is not set.
	transcripts *transcript.Store
	metrics     *metrics.Metrics

	serving   chan struct{} // closed once the daemon serves its API
	reloadMu  sync.Mutex    // one reload at a time
	collectMu sync.Mutex    // one collect at a time
	mu        sync.Mutex    // guards what follows
	cfg       *netconfig.Config
	// cfgChanged is closed (and replaced) when a reload changed cfg: the
	// periodic work then reads its interval again.
	cfgChanged chan struct{}
	nets       map[string]*netEntry             // the config's networks
	gens       map[netplugin.Target]*generation // every generation kurmad runs
	lastGen    map[string]int                   // highest generation number each network had
}

// New checks opts and fills in defaults; it opens and starts nothing.
func New(opts Options) (*Daemon, error) {
	if opts.Config == nil {
		return nil, errors.New("daemon: no config")
	}
	if opts.Socket == "" {
		opts.Socket = api.SocketIn(opts.Config.RunDir)
	}
	if opts.Logger == nil {
		opts.Logger = logrus.StandardLogger()
	}
	if opts.ConfigPath == "" {
		opts.ConfigPath = opts.Config.Path
	}
	return &Daemon{opts: opts, cfg: opts.Config, log: opts.Logger, serving: make(chan struct{}), cfgChanged: make(chan struct{}),
		nets: map[string]*netEntry{}, gens: map[netplugin.Target]*generation{}, lastGen: map[string]int{}}, nil
}

// Run boots the daemon and serves the API until ctx ends, then stops the
// plugin containers and returns nil; pods and their network namespaces
// stay for the next daemon. Run is called once. The boot order, each step
// needing the one before:
//
//  1. the state and run dirs and the journal: an unwritable state dir or a
//     second daemon on the same state dir fails here, before anything else
//     is touched; the metrics listener (metrics_listen) too;
//  2. the generations to run (planBoot): one per config network, and the
//     generations journaled pods still use that the config no longer
//     asks for, retiring, from their journaled records;
//  3. their plugin containers: retiring ones start from the image store,
//     the config's wait for their images, fetched in the background and
//     retried with backoff (a network shows fetching, or failed with the
//     reason and the next attempt); each one's status is probed once it
//     runs (unavailable while its plugin says it cannot serve adds);
//  4. the journal reconciled against the host: pods are adopted; those to
//     tear down are torn down as far as their plugin containers run, and
//     the rest waits (retried in the background, at once when a container
//     starts), keeping its netns; half-made pods stay unlisted until rolled
//     back, so no client sees a pod reconcile is about to roll back. Then
//     every network's gc, in a running generation; one whose network does
//     not run yet waits for it, as dels do, and so do orphan netns files;
//  5. the metrics, the periodic gc and check, and the API, while fetches
//     may still run: creates on a network still fetching get 503
//     network_unavailable.
func (d *Daemon) Run(ctx context.Context) error {
	d.started = time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.runCtx = ctx
	if err := d.openJournal(); err != nil {
		return err
	}
	defer d.store.Close()
	metricsListener, err := d.openObservers()
	if err != nil {
		return err
	}
	if metricsListener != nil {
		defer metricsListener.Close()
	}
	if err := d.openImages(); err != nil {
		return err
	}
	gens, err := d.planBoot()
	if err != nil {
		return err
	}
	if err := d.newPluginHost(); err != nil {
		return err
	}
	// Stopped even when Start fails half-way (ctx ended during the boot):
	// plugin containers are processes of their own and would outlive us.
	defer d.stopPluginHost()
	// Background work (fetches, retries, metrics, periodic gc and check)
	// ends before the containers and the journal it uses.
	defer func() {
		d.bgMu.Lock()
		d.bgDone = true
		d.bgMu.Unlock()
		cancel()
		d.bg.Wait()
	}()
	if err := d.newPods(); err != nil {
		return err
	}
	if err := d.startGenerations(ctx, gens); err != nil {
		return fmt.Errorf("plugin host: %w", err)
	}
	if err := d.reconcile(ctx); err != nil {
		return err
	}
	// Background work, like the fetches and retries: stopped before the
	// plugin containers.
	if metricsListener != nil {
		d.background(func() { d.serveMetrics(ctx, metricsListener) })
	}
	d.startLoops(ctx)
	return d.serve(ctx)
}

// openJournal makes the state and run dirs and opens the journal in the
// state dir.
func (d *Daemon) openJournal() error {
	for _, dir := range []string{d.cfg.StateDir, d.cfg.RunDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("cannot create %s: %w", dir, err)
		}
	}
	if err := checkWritable(d.cfg.StateDir); err != nil {
		return fmt.Errorf("state_dir %s is not writable: %w", d.cfg.StateDir, err)
	}
	store, err := state.Open(filepath.Join(d.cfg.StateDir, "kurmad.db"))
	if err != nil {
		return err
	}
	d.store = store
	return nil
}

// checkWritable creates and removes a file in dir: bolt opening an
// existing journal read-only would not tell.
func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// openImages opens the image store, <state_dir>/images.
func (d *Daemon) openImages() error {
	f, err := imagefetch.New(imagefetch.Options{
		Dir:                filepath.Join(d.cfg.StateDir, "images"),
		InsecureRegistries: d.cfg.InsecureRegistries,
		TrustedKeys:        trustedKeys(d.cfg.TrustedKeys),
		SignaturePolicy:    d.cfg.SignaturePolicy,
		RegistriesDir:      d.cfg.RegistriesDir,
		Verify:             imagefetch.Verify(d.cfg.Verify),
		MaxSize:            d.cfg.MaxImageSize,
		FetchTimeout:       d.cfg.FetchTimeout,
		InsecureDiscovery:  d.cfg.InsecureDiscovery,
		Logger:             d.log.WithField("component", "imagefetch"),
	})
	if err != nil {
		return err
	}
	d.fetcher = f
	return nil
}

func trustedKeys(keys []netconfig.TrustedKey) []imagefetch.TrustedKey {
	out := make([]imagefetch.TrustedKey, len(keys))
	for i, k := range keys {
		out[i] = imagefetch.TrustedKey(k)
	}
	return out
}

func (d *Daemon) newPluginHost() error {
	h, err := networkpod.New(networkpod.Options{
		RunDir:         d.cfg.RunDir,
		StateDir:       d.cfg.StateDir,
		PluginTimeout:  d.cfg.PluginTimeout,
		AgentPath:      d.agentPath,
		Logger:         d.log.WithField("component", "networkpod"),
		OnState:        d.onState,
		OnCall:         d.onCall,
		StatusPath:     netplugin.StatusPath,
		StatusInterval: d.cfg.StatusInterval,
		Kubernetes:     networkpod.KubernetesFromEnv(),
		CgroupParent:   d.cfg.CgroupParent,
	})
	if err != nil {
		return err
	}
	d.host = h
	return nil
}

func (d *Daemon) stopPluginHost() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.host.Stop(ctx); err != nil {
		d.log.WithError(err).Warn("stopping the plugin host")
	}
}

// newPods makes the pod lifecycle manager over the plugin containers,
// attaching new pods as updateView says.
func (d *Daemon) newPods() error {
	pods, err := podnet.New(podnet.Options{
		Config:   d.cfg,
		Exec:     d.host,
		Store:    d.store,
		NetnsDir: d.host.NetnsDir(),
		PodsDir:  filepath.Join(d.cfg.RunDir, "pods"),
		Removed:  d.podRemoved,
		// d.metrics is nil without metrics_listen, which observes nothing.
		RuntimeDropped: d.metrics.ObserveRuntimeDropped,
		RuntimeRebound: d.metrics.ObserveRuntimeRebound,
		Logger:         d.log.WithField("component", "podnet"),
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.pods = pods
	d.mu.Unlock()
	d.updateView()
	return nil
}

// podRemoved is told that a pod's record went from the journal: its
// transcript goes, and the retiring generations it was the last to need
// stop.
func (d *Daemon) podRemoved(id string) {
	d.transcripts.Forget(id)
	d.background(d.collect)
}

// reconcile brings the journal and the host back in line (see
// podnet.Manager.Reconcile), then keeps retrying, in the background, the
// teardowns that could not finish, and stops the retiring generations no
// pod needs any more.
func (d *Daemon) reconcile(ctx context.Context) error {
	if err := d.pods.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile journal: %w", err)
	}
	d.background(func() { d.pods.RunRetries(ctx) })
	d.background(d.collect)
	return nil
}

// background runs fn in a goroutine Run waits for before it returns; once
// Run is returning, it runs nothing.
func (d *Daemon) background(fn func()) {
	d.bgMu.Lock()
	defer d.bgMu.Unlock()
	if d.bgDone {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		fn()
	}()
}

// serve serves the API until ctx ends; requests in flight then get
// shutdownGrace, and the socket is removed on the way out.
func (d *Daemon) serve(ctx context.Context) error {
	log := d.log.WithField("component", "api")
	ln, err := api.Listen(d.opts.Socket, api.ListenOptions{Logger: log})
	if err != nil {
		return err
	}
	srv := api.NewServer(backend{d}, api.ServerOptions{Logger: log, OnRequest: d.metrics.ObserveRequest})
	close(d.serving)
	d.log.WithFields(logrus.Fields{
		"socket":   d.opts.Socket,
		"networks": len(d.config().Networks),
		"duration": time.Since(d.started).Round(time.Millisecond),
	}).Info("kurmad ready")
	if err := srv.Serve(ctx, ln, shutdownGrace); err != nil {
		return err
	}
	d.log.Info("shutting down: pods and their network namespaces stay for the next kurmad")
	return nil
}

// config is the config as last loaded (at boot or by Reload).
func (d *Daemon) config() *netconfig.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// WaitServing returns once the daemon serves its API (its boot is over),
// or with ctx's error.
func (d *Daemon) WaitServing(ctx context.Context) error {
	select {
	case <-d.serving:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
