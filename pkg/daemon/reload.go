package daemon

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// ErrNoConfigFile: the daemon was given a config without the file it came
// from, so there is nothing to read again.
var ErrNoConfigFile = errors.New("kurmad has no config file to reload")

// ErrBooting: a reload asked before the boot is over (it cannot be asked
// over the API then, which is not served yet).
var ErrBooting = errors.New("kurmad is still booting")

// ConfigError is a config file with problems: at a reload nothing changes.
type ConfigError struct {
	Path string
	Err  *netconfig.ValidationError
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %s has %d problem(s); nothing changed:", e.Path, len(e.Err.Problems))
	for _, p := range e.Err.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Reload reads the config file again and, when it is valid as a whole,
// applies the difference with the running config, network by network:
//   - a new network is fetched and started;
//   - a network gone from the file retires: its generations keep running
//     for the dels of the pods attached to it, and stop when the last one
//     is gone; new pods cannot attach to it;
//   - a network whose image (image, verify, image_name), allow_capabilities
//     or plugin config changed gets a new generation, started beside the
//     old one. The old one serves new pods until the new one runs, then
//     retires as above; pods keep the generation and the config snapshot
//     they were attached with for their dels;
//   - a network where only default or containerInterface changed is
//     updated in place, and an unchanged one is not touched (same
//     container, same pid; its image is not fetched again);
//   - plugin_timeout applies to the calls that start from then on,
//     status_interval from each generation's next status probe, gc_interval
//     and check_interval restart their periodic work when they changed,
//     and redact_keys applies to the transcripts kept and to come.
//
// A file with any problem, including a change of what cannot change while
// kurmad runs (state_dir, run_dir, the image store's settings,
// metrics_listen), changes nothing: the error is a *ConfigError listing
// every problem. The command-line overrides of state_dir and run_dir stay
// applied.
func (d *Daemon) Reload(ctx context.Context) (*api.ReloadResult, error) {
	select {
	case <-d.serving:
	default:
		return nil, ErrBooting
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	path := d.opts.ConfigPath
	if path == "" {
		return nil, ErrNoConfigFile
	}
	cfg, err := netconfig.Load(path)
	var ve *netconfig.ValidationError
	if errors.As(err, &ve) {
		return nil, &ConfigError{Path: path, Err: ve}
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if d.opts.StateDir != "" {
		cfg.StateDir = d.opts.StateDir
	}
	if d.opts.RunDir != "" {
		cfg.RunDir = d.opts.RunDir
	}
	if ps := fixedSettings(d.config(), cfg); len(ps) > 0 {
		return nil, &ConfigError{Path: path, Err: &netconfig.ValidationError{Problems: ps}}
	}
	res, start := d.applyConfig(cfg)
	res.Config = path
	d.host.SetPluginTimeout(cfg.PluginTimeout)
	d.host.SetStatusInterval(cfg.StatusInterval)
	d.transcripts.SetRedactKeys(cfg.RedactKeys)
	if err := d.startGenerations(d.runCtx, start); err != nil {
		return nil, fmt.Errorf("reload: plugin host: %w", err)
	}
	d.updateView()
	d.collect()
	d.log.WithFields(logrus.Fields{"config": path, "added": res.Added, "replaced": res.Replaced,
		"retired": res.Retired, "updated": res.Updated, "unchanged": len(res.Unchanged)}).Info("config reloaded")
	return res, nil
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
				Msg: fmt.Sprintf("cannot change while kurmad runs (%s); restart kurmad to change it, or set it back to %v", why, a)})
		}
	}
	const dirs, store = "it holds the journal, the images and the pods' namespaces", "the image store read it when it opened"
	check("state_dir", old.StateDir, cfg.StateDir, dirs)
	check("run_dir", old.RunDir, cfg.RunDir, dirs)
	check("cgroup_parent", old.CgroupParent, cfg.CgroupParent, "the plugin containers run in cgroups under it")
	check("insecure_registries", old.InsecureRegistries, cfg.InsecureRegistries, store)
	check("trusted_keys", old.TrustedKeys, cfg.TrustedKeys, store)
	check("insecure_discovery", old.InsecureDiscovery, cfg.InsecureDiscovery, store)
	check("verify", old.Verify, cfg.Verify, store)
	check("signature_policy", old.SignaturePolicy, cfg.SignaturePolicy, store)
	check("registries_d", old.RegistriesDir, cfg.RegistriesDir, store)
	check("max_image_size", old.MaxImageSize, cfg.MaxImageSize, store)
	check("fetch_timeout", old.FetchTimeout, cfg.FetchTimeout, store)
	check("metrics_listen", old.MetricsListen, cfg.MetricsListen, "kurmad opened it at boot")
	return ps
}

// applyConfig makes cfg the running config in the network table (see
// Reload) and returns what changed and the generations to start.
func (d *Daemon) applyConfig(cfg *netconfig.Config) (*api.ReloadResult, []*generation) {
	res := &api.ReloadResult{Added: []string{}, Replaced: []string{}, Retired: []string{}, Updated: []string{}, Unchanged: []string{}}
	var start []*generation
	d.mu.Lock()
	for _, n := range cfg.Networks {
		e := d.nets[n.Name]
		if e == nil {
			g := d.newGenerationLocked(n, 0)
			d.nets[n.Name] = &netEntry{serving: g}
			start = append(start, g)
			res.Added = append(res.Added, n.Name)
			continue
		}
		def := definitionOf(n)
		switch {
		case e.serving.def == def && def != "":
			if e.pending != nil {
				e.pending.retiring, e.pending = true, nil
			}
			if e.serving.entry.Default == n.Default && e.serving.entry.ContainerInterface == n.ContainerInterface {
				res.Unchanged = append(res.Unchanged, n.Name)
			} else {
				res.Updated = append(res.Updated, n.Name)
			}
			e.serving.entry = n
		case e.pending != nil && e.pending.def == def && def != "":
			e.pending.entry = n
			res.Replaced = append(res.Replaced, n.Name)
		default:
			if e.pending != nil {
				e.pending.retiring = true
			}
			g := d.newGenerationLocked(n, 0)
			if e.serving.image == nil {
				// It never ran: nothing to keep serving while the new one
				// starts.
				e.serving.retiring, e.serving, e.pending = true, g, nil
			} else {
				e.pending = g
			}
			start = append(start, g)
			res.Replaced = append(res.Replaced, n.Name)
		}
	}
	for name, e := range d.nets {
		if _, ok := cfg.Network(name); ok {
			continue
		}
		e.serving.retiring = true
		if e.pending != nil {
			e.pending.retiring = true
		}
		delete(d.nets, name)
		res.Retired = append(res.Retired, name)
	}
	slices.Sort(res.Retired)
	d.cfg = cfg
	close(d.cfgChanged)
	d.cfgChanged = make(chan struct{})
	d.mu.Unlock()
	for _, g := range start {
		d.record(g)
	}
	return res, start
}
