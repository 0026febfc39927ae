// Package daemon is kurmad: it wires one of each part (the journal, the
// image store, the networks and their plugin containers, the pod
// lifecycle and the API), boots them in order and serves the API until its
// context ends. cmd/kurmad holds
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
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/metrics"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/networks"
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
	// StopPlugins makes Run stop the plugin containers when it returns
	// (an uninstall); without it they run on, for the next kurmad to adopt
	// (a restart, an upgrade). StopPluginsOnExit sets it while Run runs.
	StopPlugins bool
}

// Daemon is one kurmad over one state dir and one run dir.
type Daemon struct {
	opts Options
	log  logrus.FieldLogger
	// agentPath and initPath are the kurma-agent and kurma-init binaries;
	// "" → networkpod's defaults, beside the executable. Tests, whose
	// executable is the test binary, set them.
	agentPath, initPath string
	// stopPlugins is Options.StopPlugins, or StopPluginsOnExit called.
	stopPlugins atomic.Bool
	// journalWait is how long the boot waits for another process's hold
	// on the journal to end; 0 → state's default. Tests shorten it.
	journalWait time.Duration

	started time.Time
	// gcCurrent: the networks whose boot gc the last clean stop made
	// needless (cleanstop.go).
	gcCurrent []string
	bgMu      sync.Mutex     // orders background's Add before Run's Wait
	bgDone    bool           // Run waits: no more background work
	bg        sync.WaitGroup // background work Run waits for before it returns
	store     *state.Store
	fetcher   *imagefetch.Fetcher
	nets      *networks.Controller
	pods      *podnet.Manager
	// netnsPool makes the pods' namespaces ahead of their creates.
	netnsPool *netnsfile.Pool
	// transcripts keeps each pod's last plugin calls; metrics is nil when
	// metrics_listen is not set.
	transcripts *transcript.Store
	metrics     *metrics.Metrics
	podAnswers  podAnswers // GET /v1/pods' answers, encoded

	serving  chan struct{} // closed once the daemon serves its API
	reloadMu sync.Mutex    // one reload at a time
	mu       sync.Mutex    // guards what follows
	// cfgChanged is closed (and replaced) when a reload changed the
	// config: the periodic work then reads its interval again.
	cfgChanged chan struct{}
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
	d := &Daemon{opts: opts, log: opts.Logger, serving: make(chan struct{}), cfgChanged: make(chan struct{})}
	d.stopPlugins.Store(opts.StopPlugins)
	return d, nil
}

// StopPluginsOnExit makes Run stop the plugin containers when it returns,
// as Options.StopPlugins does: kurmad's SIGUSR2, an uninstall decided
// while it runs (kurma-node's, when its DaemonSet is deleted).
func (d *Daemon) StopPluginsOnExit() { d.stopPlugins.Store(true) }

// Run boots the daemon and serves the API until ctx ends, then returns
// nil; the plugin containers run on (Options.StopPlugins stops them), and
// pods and their network namespaces stay, for the next daemon to adopt.
// Run is called once. The boot order, each step needing the one before:
//
//  1. the state and run dirs and the journal: an unwritable state dir or a
//     second daemon on the same state dir fails here, before anything else
//     is touched; the metrics listener (metrics_listen) too;
//  2. the networks (networks.Controller.Start): the generations to run,
//     one per config network, and the generations journaled pods still
//     hold that the config no longer asks for, retiring, from their
//     journaled records; those whose image is in the store start (or are
//     adopted, when a kurmad before this one left their container running)
//     at once, the others wait for their images, fetched in the background
//     and retried with backoff;
//  3. the journal reconciled against the host: pods are adopted; those to
//     tear down are torn down as far as their plugin containers run, and
//     the rest waits (retried in the background, at once when a container
//     starts), keeping its netns; half-made pods stay unlisted until rolled
//     back, so no client sees a pod reconcile is about to roll back. Then
//     every network's gc, in a running generation; one whose network does
//     not run yet waits for it, as dels do, and so do orphan netns files;
//  4. the metrics, the periodic gc and check, and the API, while fetches
//     may still run: creates on a network still fetching get 503
//     network_unavailable.
func (d *Daemon) Run(ctx context.Context) (runErr error) {
	d.started = time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.openJournal(); err != nil {
		return err
	}
	// A clean stop (booted, served, every defer below done) is noted once
	// Close folded the journal (cleanstop.go).
	var booted bool
	var current []string
	defer func() {
		if err := d.store.Close(); err == nil && booted && runErr == nil {
			writeCleanStop(d.config().StateDir, d.journalPath(), current, d.log)
		}
	}()
	defer func() { // after the background work and the deletes ended
		if booted && runErr == nil {
			current = d.pods.CurrentGCs()
		}
	}()
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
	if err := d.newNetworks(); err != nil {
		return err
	}
	// Even when Start fails half-way (ctx ended during the boot): the
	// containers are stopped, or left for the next kurmad, as a whole.
	defer d.stopNetworks()
	// Background work (retries, metrics, periodic gc and check) ends
	// before the containers and the journal it uses.
	defer func() {
		d.bgMu.Lock()
		d.bgDone = true
		d.bgMu.Unlock()
		cancel()
		d.bg.Wait()
	}()
	if err := d.nets.Start(ctx); err != nil {
		return err
	}
	if err := d.newPods(); err != nil {
		return err
	}
	defer d.netnsPool.Close()
	// What deletes left for after their answers (pod dirs) is done before
	// kurmad stops.
	defer d.pods.Wait()
	d.pods.SkipBootGC(d.gcCurrent)
	if err := d.reconcile(ctx); err != nil {
		return err
	}
	booted = true
	if metricsListener != nil {
		d.background(func() { d.serveMetrics(ctx, metricsListener) })
	}
	d.startLoops(ctx)
	return d.serve(ctx)
}

// openJournal makes the state and run dirs and opens the journal in the
// state dir.
func (d *Daemon) openJournal() error {
	for _, dir := range []string{d.config().StateDir, d.config().RunDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("cannot create %s: %w", dir, err)
		}
	}
	if err := checkWritable(d.config().StateDir); err != nil {
		return fmt.Errorf("state_dir %s is not writable: %w", d.config().StateDir, err)
	}
	d.gcCurrent = takeCleanStop(d.config().StateDir, d.journalPath(), d.log)
	store, err := state.Open(d.journalPath(), state.WithLockTimeout(d.journalWait))
	if err != nil {
		return err
	}
	d.store = store
	return nil
}

// journalPath is the journal's file.
func (d *Daemon) journalPath() string { return filepath.Join(d.config().StateDir, "kurmad.db") }

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
		Dir:                filepath.Join(d.config().StateDir, "images"),
		InsecureRegistries: d.config().InsecureRegistries,
		TrustedKeys:        trustedKeys(d.config().TrustedKeys),
		SignaturePolicy:    d.config().SignaturePolicy,
		RegistriesDir:      d.config().RegistriesDir,
		Verify:             imagefetch.Verify(d.config().Verify),
		MaxSize:            d.config().MaxImageSize,
		FetchTimeout:       d.config().FetchTimeout,
		InsecureDiscovery:  d.config().InsecureDiscovery,
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

// newNetworks makes the networks' owner, and under it the plugin host.
func (d *Daemon) newNetworks() error {
	cfg := d.opts.Config
	c, err := networks.New(networks.Options{
		Config:  cfg,
		Store:   d.store,
		Fetcher: d.fetcher,
		Host: networkpod.Options{
			RunDir:         cfg.RunDir,
			StateDir:       cfg.StateDir,
			PluginTimeout:  cfg.PluginTimeout,
			AgentPath:      d.agentPath,
			InitPath:       d.initPath,
			Logger:         d.log.WithField("component", "networkpod"),
			OnCall:         d.onCall,
			StatusPath:     netplugin.StatusPath,
			StatusInterval: cfg.StatusInterval,
			Kubernetes:     networkpod.KubernetesFromEnv(cfg.RunDir),
			CgroupParent:   cfg.CgroupParent,
		},
		// d.metrics is nil without metrics_listen, which observes nothing.
		OnFetch: d.metrics.ObserveFetch,
		Logger:  d.log.WithField("component", "networks"),
	})
	if err != nil {
		return err
	}
	d.nets = c
	return nil
}

// stopNetworks stops the plugin containers (Options.StopPlugins) or
// leaves them running for the next kurmad.
func (d *Daemon) stopNetworks() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if d.stopPlugins.Load() {
		if err := d.nets.Stop(ctx); err != nil {
			d.log.WithError(err).Warn("stopping the plugin host")
		}
		return
	}
	if err := d.nets.Detach(ctx); err != nil {
		d.log.WithError(err).Warn("leaving the plugin containers to the next kurmad")
	}
	d.log.Info("the plugin containers run on, for the next kurmad to adopt")
}

// netnsPoolSize is how many pod namespaces wait ready (netnsfile.Pool):
// enough for a burst of creates at a few clients; a burst larger than it
// makes the rest as the pool refills.
const netnsPoolSize = 4

// newPods makes the pod lifecycle manager over the networks, and the pool
// its namespaces come from.
func (d *Daemon) newPods() error {
	cfg := d.config()
	d.netnsPool = netnsfile.NewPool(netnsPoolSize)
	pods, err := podnet.New(podnet.Options{
		Networks:  d.nets,
		Exec:      d.nets,
		Store:     d.store,
		NetnsDir:  d.nets.NetnsDir(),
		PodsDir:   filepath.Join(cfg.RunDir, "pods"),
		NetnsPool: d.netnsPool,
		Removed:   d.transcripts.Forget,
		// d.metrics is nil without metrics_listen, which observes nothing.
		RuntimeDropped: d.metrics.ObserveRuntimeDropped,
		RuntimeRebound: d.metrics.ObserveRuntimeRebound,
		Logger:         d.log.WithField("component", "podnet"),
	})
	if err != nil {
		return err
	}
	d.pods = pods
	return nil
}

// reconcile brings the journal and the host back in line (see
// podnet.Manager.Reconcile), then keeps retrying, in the background, the
// teardowns that could not finish.
func (d *Daemon) reconcile(ctx context.Context) error {
	if err := d.pods.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile journal: %w", err)
	}
	d.background(func() { d.pods.RunRetries(ctx) })
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
	if d.nets == nil {
		return d.opts.Config
	}
	return d.nets.Config()
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
