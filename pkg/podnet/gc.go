package podnet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// validAttachmentsKey is where gc's stdin carries the attachments that are
// still valid (CNI 1.1.0's GC, as libcni sends it).
const validAttachmentsKey = "cni.dev/valid-attachments"

// GC runs network's /opt/network/gc, with every attachment of that network
// the journal holds (pods of any phase: a pod whose teardown failed still
// needs its del) as the valid ones in the config on stdin, so that the
// plugin releases whatever it holds for any other: pods whose records were
// lost, or removed without a successful del. Adds to network wait while GC
// runs, so none can make an attachment the valid list misses. An image
// without the executable is not asked (nil). The config is the network's
// from kurmad's config, or, for a network the config dropped, the newest
// snapshot the journal holds; ErrUnknownNetwork when neither has it.
func (m *Manager) GC(ctx context.Context, network string) error {
	if p, ok := m.opts.Exec.(Provider); ok && !p.Provides(network, GCPath) {
		m.log.WithField("network", network).Debug("gc: the network's image has none")
		return nil
	}
	conf, err := m.networkConfig(network)
	if err != nil {
		return err
	}
	lock := m.netLock(network)
	lock.Lock()
	defer lock.Unlock()
	valid, err := m.validAttachments(network)
	if err != nil {
		return err
	}
	list, err := json.Marshal(valid)
	if err == nil {
		conf, err = netconfig.WithKey(conf, validAttachmentsKey, list)
	}
	if err != nil {
		return netconfig.WrapNetworkError(network, GCPath, err)
	}
	start := time.Now()
	_, stderr, err := m.opts.Exec.Exec(ctx, network, GCPath, nil, conf)
	log := m.log.WithFields(logrus.Fields{"network": network, "op": "gc", "valid": len(valid), "duration": time.Since(start)})
	if len(stderr) > 0 {
		log = log.WithField("stderr", stderrTail(stderr))
	}
	if err != nil {
		log.WithError(err).Warn("gc failed")
		return netconfig.WrapNetworkError(network, GCPath, err)
	}
	log.Debug("gc done")
	return nil
}

// networkConfig is the config network's main and gc get.
func (m *Manager) networkConfig(network string) ([]byte, error) {
	if n, ok := m.opts.Config.Network(network); ok {
		return n.PluginConfig(nil)
	}
	nets, err := m.opts.Store.Networks()
	if err != nil {
		return nil, err
	}
	for _, n := range nets {
		if n.Name == network && len(n.Config) > 0 {
			return n.Config, nil
		}
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownNetwork, network)
}

// validAttachments lists every journaled attachment of network that has an
// interface name.
func (m *Manager) validAttachments(network string) ([]types.GCAttachment, error) {
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		return nil, err
	}
	valid := []types.GCAttachment{}
	for _, r := range recs {
		for _, a := range r.Attachments {
			if a.Network == network && a.Interface != "" {
				valid = append(valid, types.GCAttachment{ContainerID: r.ID, IfName: a.Interface})
			}
		}
	}
	return valid, nil
}

// Collect runs GC for every network kurmad knows (the config's, then those
// only journaled pods still use), each error logged, and then removes the
// netns files and pod dirs named like a pod id that the journal does not
// hold. Orphan netns files are removed only when every network's GC
// succeeded: a plugin's del finds an orphan's interfaces (and, for the
// bridge plugin, its masquerade rule) only while its netns exists, so an
// orphan is kept for a later Collect while a network could not collect.
// It returns the number of networks whose GC failed.
func (m *Manager) Collect(ctx context.Context) int {
	log := m.log.WithField("op", "gc")
	failed := 0
	for _, name := range m.knownNetworks() {
		if err := m.GC(ctx, name); err != nil {
			failed++
			log.WithError(err).WithField("network", name).Warn("gc did not run; orphan netns files are kept until it does")
		}
	}
	known, err := m.journaledIDs()
	if err != nil {
		log.WithError(err).Warn("cannot list the journal: no orphan removed")
		return failed
	}
	orphans := m.sweep(m.opts.PodsDir, known, os.RemoveAll, log)
	if failed == 0 {
		orphans += m.sweep(m.opts.NetnsDir, known, netnsfile.Remove, log)
	}
	if orphans > 0 {
		log.WithField("orphans", orphans).Info("orphans removed")
	}
	return failed
}

// knownNetworks are the config's networks, then the networks only
// journaled pods use.
func (m *Manager) knownNetworks() []string {
	names := m.opts.Config.Names()
	nets, err := m.opts.Store.Networks()
	if err != nil {
		m.log.WithError(err).Warn("cannot list the journal's networks")
		return names
	}
	for _, n := range nets {
		if _, ok := m.opts.Config.Network(n.Name); !ok {
			names = append(names, n.Name)
		}
	}
	return names
}

// journaledIDs is the set of pod ids the journal holds.
func (m *Manager) journaledIDs() (map[string]bool, error) {
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		return nil, err
	}
	known := make(map[string]bool, len(recs))
	for _, r := range recs {
		known[r.ID] = true
	}
	return known, nil
}
