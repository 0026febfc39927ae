package daemon

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/networkpod"
)

// imageUse records which image each network's plugin runs from: podnet
// journals it with every attachment, and an image in use cannot be removed.
// The zero value is ready to use.
type imageUse struct {
	mu        sync.Mutex
	byNetwork map[string]string // network name → image ID
}

func (u *imageUse) set(network, imageID string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byNetwork == nil {
		u.byNetwork = map[string]string{}
	}
	u.byNetwork[network] = imageID
}

// of returns the image ID network runs from, "" when it has none.
func (u *imageUse) of(network string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byNetwork[network]
}

// users returns the networks that run from imageID, sorted.
func (u *imageUse) users(imageID string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var users []string
	for name, id := range u.byNetwork {
		if id == imageID {
			users = append(users, name)
		}
	}
	sort.Strings(users)
	return users
}

// networkSpecs returns what the plugin containers run: every configured
// network (fetchAll), then the retired ones (retiredNetworks).
func (d *Daemon) networkSpecs(ctx context.Context) ([]networkpod.Spec, error) {
	specs := d.fetchAll(ctx)
	retired, err := d.retiredNetworks()
	if err != nil {
		return nil, err
	}
	return append(specs, retired...), nil
}

// fetchAll fetches every network's image concurrently. A network whose
// image cannot be had still gets a Spec, carrying the error, so it shows as
// failed instead of stopping the daemon.
func (d *Daemon) fetchAll(ctx context.Context) []networkpod.Spec {
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
			img, err := d.fetcher.Fetch(ctx, n.ACI, imagefetch.WithVerify(imagefetch.Verify(n.Verify)), imagefetch.WithImageName(n.ImageName))
			d.metrics.ObserveFetch(n.Name, err == nil, time.Since(start))
			if err != nil {
				spec.Err = err
				d.log.WithFields(logrus.Fields{"network": n.Name, "image": n.ACI}).WithError(err).Error("image fetch failed")
				return
			}
			spec.Image = img
			d.images.set(n.Name, img.ID)
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
func (d *Daemon) retiredNetworks() ([]networkpod.Spec, error) {
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
			d.images.set(jn.Name, img.ID)
			log.Warn("network removed from the config: running it from its journaled snapshot until its pods are deleted")
		}
		specs = append(specs, spec)
	}
	return specs, nil
}
