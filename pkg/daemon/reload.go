package daemon

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// ErrNoConfigFile: the daemon was given a config without the file it came
// from, so there is nothing to read again.
var ErrNoConfigFile = errors.New("kurmad has no config file to reload")

// ErrBooting: a reload asked before the boot is over (it cannot be asked
// over the API then, which is not served yet).
var ErrBooting = errors.New("kurmad is still booting")

// Reload reads the config file again (LoadConfig, as at boot) and, when it
// is valid as a whole, applies it: the networks' difference with the
// running config, network by network, as networks.Controller.Apply says
// (new networks start, gone ones retire, changed ones get a new
// generation); trusted_keys and signature_policy are read again and judge
// the fetches that follow; gc_interval and check_interval restart their periodic work
// when they changed, and redact_keys applies to the transcripts kept and
// to come.
//
// A file with any problem, including a change of what cannot change while
// kurmad runs (state_dir, run_dir, the image store's settings,
// metrics_listen), changes nothing: the error is a *ConfigError listing
// every problem. The command-line overrides of state_dir and run_dir stay
// applied.
func (d *Daemon) Reload(ctx context.Context) (*api.ReloadResult, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	cfg, err := d.readReload()
	if err != nil {
		return nil, err
	}
	path := d.opts.ConfigPath
	// The trust (trusted_keys, signature_policy) is read again on every
	// reload, so that a key file rewritten in place counts too. It and
	// the networks take effect together: set before the networks' fetches
	// start, put back when they fail to apply.
	undoTrust, err := d.fetcher.SwapTrust(trustedKeys(cfg.TrustedKeys), cfg.SignaturePolicy)
	if err != nil {
		return nil, &ConfigError{Path: path, Reload: true, Err: &netconfig.ValidationError{
			Problems: []netconfig.Problem{{Path: "trusted_keys, signature_policy", Msg: err.Error()}}}}
	}
	changes, err := d.nets.Apply(context.WithoutCancel(ctx), cfg)
	if err != nil {
		undoTrust()
		return nil, fmt.Errorf("reload: plugin host: %w", err)
	}
	res := wireChanges(changes, path, false)
	d.metrics.AddNetworks(res.Added...)
	d.transcripts.SetRedactKeys(cfg.RedactKeys)
	d.mu.Lock()
	close(d.cfgChanged)
	d.cfgChanged = make(chan struct{})
	d.mu.Unlock()
	d.log.WithFields(logrus.Fields{"config": path, "added": res.Added, "replaced": res.Replaced,
		"retired": res.Retired, "updated": res.Updated, "unchanged": len(res.Unchanged)}).Info("config reloaded")
	return res, nil
}

// PlanReload is what Reload would do now, without doing it (POST
// /v1/reload?dry_run=true): the file read and checked as Reload checks
// it, every problem a *ConfigError, and the networks' difference with the
// running config (networks.Controller.Plan).
func (d *Daemon) PlanReload(ctx context.Context) (*api.ReloadResult, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	cfg, err := d.readReload()
	if err != nil {
		return nil, err
	}
	return wireChanges(d.nets.Plan(cfg), d.opts.ConfigPath, true), nil
}

// readReload reads and checks the config file for a reload (LoadConfig,
// as at boot, then what cannot change while kurmad runs); d.reloadMu is
// held.
func (d *Daemon) readReload() (*netconfig.Config, error) {
	select {
	case <-d.serving:
	default:
		return nil, ErrBooting
	}
	path := d.opts.ConfigPath
	if path == "" {
		return nil, ErrNoConfigFile
	}
	cfg, err := LoadConfig(path, d.opts.StateDir, d.opts.RunDir)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.Reload = true
		return nil, ce
	}
	if err != nil {
		return nil, err
	}
	if ps := fixedSettings(d.config(), cfg); len(ps) > 0 {
		return nil, &ConfigError{Path: path, Err: &netconfig.ValidationError{Problems: ps}, Reload: true}
	}
	return cfg, nil
}

// fixedSettings lists the settings that differ between the running config
// and cfg but cannot change while kurmad runs: the state and run dirs hold
// the journal, the image store and the pods' namespaces, the image
// store's settings were read when it opened, and the metrics listener was
// opened at boot.
func fixedSettings(old, cfg *netconfig.Config) []netconfig.Problem {
	var ps []netconfig.Problem
	check := func(key string, a, b any, why string) {
		if !reflect.DeepEqual(a, b) {
			ps = append(ps, netconfig.Problem{Path: key,
				Msg: fmt.Sprintf("cannot change while kurmad runs (%s); restart kurmad to change it, or %s", why, setBack(a))})
		}
	}
	const dirs, store = "it holds the journal, the images and the pods' namespaces", "the image store read it when it opened"
	check("state_dir", old.StateDir, cfg.StateDir, dirs)
	check("run_dir", old.RunDir, cfg.RunDir, dirs)
	check("cgroup_parent", old.CgroupParent, cfg.CgroupParent, "the plugin containers run in cgroups under it")
	check("insecure_registries", old.InsecureRegistries, cfg.InsecureRegistries, store)
	check("insecure_discovery", old.InsecureDiscovery, cfg.InsecureDiscovery, store)
	check("verify", old.Verify, cfg.Verify, store)
	check("registries_d", old.RegistriesDir, cfg.RegistriesDir, store)
	check("max_image_size", maxImageSize(old), maxImageSize(cfg), store)
	check("fetch_timeout", fetchTimeout(old), fetchTimeout(cfg), store)
	check("metrics_listen", old.MetricsListen, cfg.MetricsListen, "kurmad opened it at boot")
	return ps
}

// fetchTimeout is the bound the image store puts on each fetch under cfg:
// an absent fetch_timeout and its default written out are the same.
func fetchTimeout(cfg *netconfig.Config) time.Duration {
	if cfg.FetchTimeout <= 0 {
		return imagefetch.DefaultFetchTimeout
	}
	return cfg.FetchTimeout
}

// maxImageSize is the cap the image store puts on each image under cfg:
// an absent max_image_size and its default written out are the same.
func maxImageSize(cfg *netconfig.Config) int64 {
	if cfg.MaxImageSize <= 0 {
		return imagefetch.DefaultMaxSize
	}
	return cfg.MaxImageSize
}

// setBack says how to put a setting back to a, its running value: a
// value that was not set is removed (printed, it would read as nothing).
func setBack(a any) string {
	v := reflect.ValueOf(a)
	switch {
	case !v.IsValid() || v.IsZero() || (v.Kind() == reflect.Slice && v.Len() == 0):
		return "remove it (it was not set)"
	case v.Kind() == reflect.String:
		return fmt.Sprintf("set it back to %q", a)
	}
	return fmt.Sprintf("set it back to %v", a)
}
