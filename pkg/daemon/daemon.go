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
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/metrics"
	"github.com/kurma-project/kurma/pkg/netconfig"
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
	cfg  *netconfig.Config
	log  logrus.FieldLogger
	// agentPath is the kurma-agent binary; "" → networkpod's default, beside
	// the executable. Tests, whose executable is the test binary, set it.
	agentPath string

	started    time.Time
	store      *state.Store
	fetcher    *imagefetch.Fetcher
	containers *networkpod.Containers
	pods       *podnet.Manager
	images     imageUse
	// transcripts keeps each pod's last plugin calls; metrics is nil when
	// metrics_listen is not set.
	transcripts *transcript.Store
	metrics     *metrics.Metrics
}

// New checks opts and fills in defaults; it opens and starts nothing.
func New(opts Options) (*Daemon, error) {
	if opts.Config == nil {
		return nil, errors.New("daemon: no config")
	}
	if opts.Socket == "" {
		opts.Socket = filepath.Join(opts.Config.RunDir, "kurmad.sock")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.StandardLogger()
	}
	return &Daemon{opts: opts, cfg: opts.Config, log: opts.Logger}, nil
}

// Run boots the daemon and serves the API until ctx ends, then stops the
// plugin containers and returns nil; pods and their network namespaces
// stay for the next daemon. Run is called once. The boot order, each step
// needing the one before:
//
//  1. the state and run dirs and the journal: an unwritable state dir or a
//     second daemon on the same state dir fails here, before anything else
//     is touched; the metrics listener (metrics_listen) too;
//  2. every network's image, concurrently (a network whose image cannot be
//     had shows failed and does not stop the boot), and the networks the
//     config dropped that journaled pods still use (retiredNetworks);
//  3. the plugin containers;
//  4. the journal reconciled against the host, ending with every
//     network's gc;
//  5. the API, only now, so that no client ever sees a pod reconcile is
//     about to finish or roll back; the metrics, and the periodic gc and
//     check.
func (d *Daemon) Run(ctx context.Context) error {
	d.started = time.Now()
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
	specs, err := d.networkSpecs(ctx)
	if err != nil {
		return err
	}
	if err := d.newContainers(); err != nil {
		return err
	}
	// Stopped even when Start fails half-way (ctx ended during the boot):
	// plugin containers are processes of their own and would outlive us.
	defer d.stopContainers()
	if err := d.containers.Start(ctx, specs); err != nil {
		return fmt.Errorf("networking pod: %w", err)
	}
	if err := d.reconcile(ctx); err != nil {
		return err
	}
	if metricsListener != nil {
		go d.serveMetrics(ctx, metricsListener)
	}
	// Stopped before the plugin containers (defers run last first).
	stopLoops := d.startLoops(ctx)
	defer stopLoops()
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

func (d *Daemon) newContainers() error {
	cs, err := networkpod.New(networkpod.Options{
		RunDir:         d.cfg.RunDir,
		StateDir:       d.cfg.StateDir,
		PluginTimeout:  d.cfg.PluginTimeout,
		AgentPath:      d.agentPath,
		Logger:         d.log.WithField("component", "networkpod"),
		OnCall:         d.onCall,
		StatusPath:     podnet.StatusPath,
		StatusInterval: d.cfg.StatusInterval,
	})
	if err != nil {
		return err
	}
	d.containers = cs
	return nil
}

func (d *Daemon) stopContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.containers.Stop(ctx); err != nil {
		d.log.WithError(err).Warn("stopping the networking pod")
	}
}

// reconcile makes the pod lifecycle manager and brings the journal and the
// host back in line (see podnet.Manager.Reconcile).
func (d *Daemon) reconcile(ctx context.Context) error {
	pods, err := podnet.New(podnet.Options{
		Config:   d.cfg,
		Exec:     d.containers,
		Store:    d.store,
		NetnsDir: d.containers.NetnsDir(),
		PodsDir:  filepath.Join(d.cfg.RunDir, "pods"),
		ImageID:  d.images.of,
		Logger:   d.log.WithField("component", "podnet"),
	})
	if err != nil {
		return err
	}
	d.pods = pods
	if err := pods.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile journal: %w", err)
	}
	return nil
}

// serve serves the API until ctx ends; requests in flight then get
// shutdownGrace, and the socket is removed on the way out.
func (d *Daemon) serve(ctx context.Context) error {
	log := d.log.WithField("component", "api")
	ln, err := api.Listen(d.opts.Socket, api.ListenOptions{Logger: log})
	if err != nil {
		return err
	}
	srv := api.NewServer(backend{d}, api.ServerOptions{Logger: log})
	d.log.WithFields(logrus.Fields{
		"socket":   d.opts.Socket,
		"networks": len(d.cfg.Networks),
		"duration": time.Since(d.started).Round(time.Millisecond),
	}).Info("kurmad ready")
	if err := srv.Serve(ctx, ln, shutdownGrace); err != nil {
		return err
	}
	d.log.Info("shutting down: pods and their network namespaces stay for the next kurmad")
	return nil
}
