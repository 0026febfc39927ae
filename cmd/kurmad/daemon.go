package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
)

// daemon is kurmad's wiring: one of each part, and the adapter that turns
// them into the API's Backend.
type daemon struct {
	cfg     *netconfig.Config
	socket  string
	log     logrus.FieldLogger
	started time.Time

	store      *state.Store
	fetcher    *imagefetch.Fetcher
	containers *networkpod.Containers
	pods       *podnet.Manager

	mu     sync.Mutex
	images map[string]string // network name → image ID in use
}

// run boots kurmad and serves until ctx is cancelled (SIGTERM/SIGINT).
func run(ctx context.Context, cfg *netconfig.Config, socket string, log logrus.FieldLogger) error {
	d := &daemon{cfg: cfg, socket: socket, log: log, started: time.Now(), images: map[string]string{}}
	for _, dir := range []string{cfg.StateDir, cfg.RunDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("cannot create %s: %w", dir, err)
		}
	}
	if err := checkWritable(cfg.StateDir); err != nil {
		return fmt.Errorf("state_dir %s is not writable: %w", cfg.StateDir, err)
	}
	store, err := state.Open(filepath.Join(cfg.StateDir, "kurmad.db"))
	if err != nil {
		return err
	}
	d.store = store
	defer store.Close()

	d.fetcher, err = imagefetch.New(imagefetch.Options{
		Dir:                filepath.Join(cfg.StateDir, "images"),
		InsecureRegistries: cfg.InsecureRegistries,
		TrustedKeys:        trustedKeys(cfg.TrustedKeys),
		InsecureDiscovery:  cfg.InsecureDiscovery,
		Logger:             log.WithField("component", "imagefetch"),
	})
	if err != nil {
		return err
	}

	specs := d.fetchAll(ctx)
	retired, err := d.retiredNetworks()
	if err != nil {
		return err
	}
	specs = append(specs, retired...)

	d.containers, err = networkpod.New(networkpod.Options{
		RunDir:        cfg.RunDir,
		StateDir:      cfg.StateDir,
		PluginTimeout: cfg.PluginTimeout,
		Logger:        log.WithField("component", "networkpod"),
	})
	if err != nil {
		return err
	}
	if err := d.containers.Start(ctx, specs); err != nil {
		return fmt.Errorf("networking pod: %w", err)
	}
	defer d.stopContainers()

	d.pods, err = podnet.New(podnet.Options{
		Config:   cfg,
		Exec:     d.containers,
		Store:    store,
		NetnsDir: d.containers.NetnsDir(),
		PodsDir:  filepath.Join(cfg.RunDir, "pods"),
		ImageID:  d.imageID,
		Logger:   log.WithField("component", "podnet"),
	})
	if err != nil {
		return err
	}
	if err := d.pods.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile journal: %w", err)
	}

	ln, err := api.Listen(socket)
	if err != nil {
		return err
	}
	ln.SetLogger(log.WithField("component", "api"))
	srv := api.NewServer(d, api.WithLogger(log.WithField("component", "api")))
	log.WithFields(logrus.Fields{"socket": socket, "networks": len(cfg.Networks), "duration": time.Since(d.started).Round(time.Millisecond)}).Info("kurmad ready")
	// Serve returns when ctx ends (SIGTERM/SIGINT), after in-flight requests
	// had their grace period; the socket is removed on the way out.
	if err := srv.Serve(ctx, ln, 30*time.Second); err != nil {
		return err
	}
	log.Info("shutting down: pods and their network namespaces stay for the next kurmad")
	return nil
}

func (d *daemon) stopContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.containers.Stop(ctx); err != nil {
		d.log.WithError(err).Warn("stopping the networking pod")
	}
}

// fetchAll fetches every network's image concurrently. A network whose
// image cannot be had still gets a Spec, carrying the error, so it shows as
// failed instead of stopping the daemon.
func (d *daemon) fetchAll(ctx context.Context) []networkpod.Spec {
	specs := make([]networkpod.Spec, len(d.cfg.Networks))
	var wg sync.WaitGroup
	for i, n := range d.cfg.Networks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := networkpod.Spec{Name: n.Name, AllowCapabilities: n.AllowCapabilities}
			defer func() { specs[i] = spec }()
			conf, err := n.PluginConfig(nil)
			if err != nil {
				spec.Err = err
				return
			}
			spec.Config = conf
			start := time.Now()
			img, err := d.fetcher.Fetch(ctx, n.ACI)
			if err != nil {
				spec.Err = fmt.Errorf("image %s: %w", n.ACI, err)
				d.log.WithFields(logrus.Fields{"network": n.Name, "image": n.ACI}).WithError(err).Error("image fetch failed")
				return
			}
			spec.Image = img
			d.mu.Lock()
			d.images[n.Name] = img.ID
			d.mu.Unlock()
			d.log.WithFields(logrus.Fields{"network": n.Name, "image": img.ID, "duration": time.Since(start).Round(time.Millisecond)}).Info("image ready")
		}()
	}
	wg.Wait()
	return specs
}

// retiredNetworks returns specs for networks that journaled pods are
// attached to but that the config no longer names. They run from the image
// and config snapshot of their last attachment so those pods can still be
// torn down; pods cannot attach to them (podnet only knows the config's).
func (d *daemon) retiredNetworks() ([]networkpod.Spec, error) {
	journaled, err := d.store.Networks()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var specs []networkpod.Spec
	for _, jn := range journaled {
		if _, ok := d.cfg.Network(jn.Name); ok {
			continue
		}
		spec := networkpod.Spec{Name: jn.Name, Config: jn.Config}
		log := d.log.WithFields(logrus.Fields{"network": jn.Name, "image": jn.Image})
		if img, err := d.fetcher.Get(jn.Image); err != nil {
			spec.Err = fmt.Errorf("network removed from the config and its image %s is gone from the store: %w", jn.Image, err)
			log.WithError(err).Error("pods attached to a removed network cannot be torn down")
		} else {
			spec.Image = img
			d.mu.Lock()
			d.images[jn.Name] = img.ID
			d.mu.Unlock()
			log.Warn("network removed from the config: running it from its journaled snapshot until its pods are deleted")
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

func (d *daemon) imageID(network string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.images[network]
}

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

func trustedKeys(keys []netconfig.TrustedKey) []imagefetch.TrustedKey {
	out := make([]imagefetch.TrustedKey, len(keys))
	for i, k := range keys {
		out[i] = imagefetch.TrustedKey(k)
	}
	return out
}
