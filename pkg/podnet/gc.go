package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"

	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// validAttachmentsKey is where gc's stdin carries the attachments that are
// still valid (CNI 1.1.0's GC, as libcni sends it).
const validAttachmentsKey = "cni.dev/valid-attachments"

// ErrGCWaits: no generation of the network has a running plugin container,
// so its gc did not run; it runs once one does (Networks.Started). It wraps
// netplugin.ErrUnavailable.
var ErrGCWaits = fmt.Errorf("gc waits for the network's plugin container to run: %w", netplugin.ErrUnavailable)

// GC runs network's /opt/network/gc, with every attachment of that network
// the journal holds whose del has not succeeded (pods of any phase, of any
// generation: a pod whose teardown failed still needs its del) as the
// valid ones in the config on stdin, so that the plugin releases whatever
// it holds for any other: pods whose records were lost, or removed by
// force. Adds to network wait while GC runs, so none can make an
// attachment the valid list misses.
//
// A network's generations share its plugin state (libcni's cache, IPAM
// leases), so one gc serves them all: it runs in the generation
// Networks.GCTarget names (the one new pods attach to when that one runs,
// else the newest one that runs), with that generation's config. When none
// runs, nothing runs: the error wraps ErrGCWaits, and the gc runs once one
// does (Networks.Started, RunRetries). An image without the executable is
// not asked (nil). netplugin.ErrUnknownNetwork when the network has no
// generation.
func (m *Manager) GC(ctx context.Context, network string) error {
	err := m.gc(ctx, network)
	if errors.Is(err, ErrGCWaits) {
		m.gcWaits(network)
	} else {
		m.gcsRan([]string{network}, err != nil)
	}
	return err
}

// gc is GC without the bookkeeping of the gcs that wait. The policy
// network has no attachments and no gc: it is refused.
func (m *Manager) gc(ctx context.Context, network string) error {
	err := m.runGC(ctx, network)
	m.noteGC(network, err)
	return err
}

func (m *Manager) runGC(ctx context.Context, network string) error {
	if n, ok := m.config().Network(network); ok && n.IsPolicy() {
		return &netplugin.NetworkError{Network: network, Op: netplugin.GCPath, Err: fmt.Errorf("%w: %w", ErrBadRequest, policyNetworkError(network))}
	}
	t, conf, err := m.opts.Networks.GCTarget(network)
	switch {
	case errors.Is(err, netplugin.ErrUnavailable):
		return &netplugin.NetworkError{Network: network, Op: netplugin.GCPath, Err: ErrGCWaits}
	case err != nil:
		return err
	}
	if p, ok := m.opts.Exec.(Provider); ok && !p.Provides(t.Network, t.Generation, netplugin.GCPath) {
		m.log.WithFields(logrus.Fields{"network": network, "generation": t.Generation}).Debug("gc: the network's image has none")
		return nil
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
		return netplugin.WrapNetworkError(network, netplugin.GCPath, err)
	}
	start := time.Now()
	_, stderr, err := m.opts.Exec.Exec(ctx, netplugin.NewCall(t, netplugin.GCPath, nil, conf))
	log := m.log.WithFields(logrus.Fields{"network": network, "generation": t.Generation, "op": "gc", "valid": len(valid), "duration": time.Since(start)})
	if len(stderr) > 0 {
		log = log.WithField("stderr", stderrTail(stderr))
	}
	if errors.Is(err, netplugin.ErrUnavailable) {
		// Its container stopped since gcTarget looked.
		return &netplugin.NetworkError{Network: network, Op: netplugin.GCPath, Err: ErrGCWaits}
	}
	if err != nil {
		log.WithError(err).Warn("gc failed")
		return netplugin.WrapNetworkError(network, netplugin.GCPath, err)
	}
	log.Debug("gc done")
	return nil
}

// noteGC keeps whether network's last gc failed (CurrentGCs); a gc that
// waits tells nothing.
func (m *Manager) noteGC(network string, err error) {
	if errors.Is(err, ErrGCWaits) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.gcFailed[network] = true
	} else {
		delete(m.gcFailed, network)
	}
}

// CurrentGCs lists the config's networks whose plugins hold nothing the
// journal does not, as far as this kurmad knows: their last gc did not
// fail, none waits and none is owed (a removal by force). kurmad notes
// them at a clean stop; the next boot skips their gc (SkipBootGC) when
// the journal is the one that stop left.
func (m *Manager) CurrentGCs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, n := range m.config().AttachNames() {
		owed := false
		for t := range m.gcOwed {
			owed = owed || t.Network == n
		}
		if !m.gcWait[n] && !m.gcFailed[n] && !owed {
			out = append(out, n)
		}
	}
	return out
}

// SkipBootGC names the networks whose gc Reconcile's Collect need not
// run: the kurmad before this one stopped cleanly with them current
// (CurrentGCs) and the journal is the one it left, so their plugins hold
// nothing it does not know. A boot after a restart then waits for no gc.
// Reconcile runs them all the same when it tore down or kept any pod.
func (m *Manager) SkipBootGC(networks []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bootSkip = slices.Clone(networks)
}

// validAttachments lists every journaled attachment of network that has an
// interface name and whose del has not succeeded.
func (m *Manager) validAttachments(network string) ([]types.GCAttachment, error) {
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		return nil, err
	}
	valid := []types.GCAttachment{}
	for _, r := range recs {
		for _, a := range r.Attachments {
			if a.Network == network && a.Interface != "" && !a.Deleted {
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
// orphan is kept while a network could not collect. A gc that waits for
// its network's plugin container to run (ErrGCWaits) runs once it does,
// and the orphans go then, when every such gc succeeded; a gc that failed
// leaves them for the next Collect. It returns the number of networks
// whose GC failed (not those that wait).
func (m *Manager) Collect(ctx context.Context) int {
	return m.collect(ctx, nil)
}

// collect is Collect without the gcs of the networks skip names.
func (m *Manager) collect(ctx context.Context, skip []string) int {
	log := m.log.WithField("op", "gc")
	failed, waiting := 0, 0
	var names []string
	for _, n := range m.knownNetworks() {
		if slices.Contains(skip, n) {
			log.WithField("network", n).Debug("gc skipped: the kurmad before this one stopped cleanly with it done, and the journal is the one it left")
			continue
		}
		names = append(names, n)
	}
	errs := m.gcAll(ctx, names)
	for i, name := range names {
		err := errs[i]
		if errors.Is(err, ErrGCWaits) {
			waiting++
			m.gcWaits(name)
			log.WithField("network", name).Info("gc waits for the network's plugin container to run; orphan netns files are kept until it ran")
			continue
		}
		if err != nil {
			failed++
			log.WithError(err).WithField("network", name).Warn("gc did not run; orphan netns files are kept until it does")
		}
		m.mu.Lock()
		m.endWaitLocked(name)
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.sweepDue = failed == 0 && waiting > 0
	m.mu.Unlock()
	m.sweepOrphans(failed == 0 && waiting == 0, log)
	return failed
}

// gcAll runs gc for each of names, collectGCs at a time (each in its own
// network's plugin container: a boot after a restart waited for twenty of
// them one after the other), and returns their errors in names' order.
func (m *Manager) gcAll(ctx context.Context, names []string) []error {
	errs := make([]error, len(names))
	var g errgroup.Group
	g.SetLimit(collectGCs)
	for i, name := range names {
		g.Go(func() error {
			errs[i] = m.gc(ctx, name)
			return nil // each is its network's: kept in errs
		})
	}
	_ = g.Wait()
	return errs
}

// collectGCs is how many networks' gcs Collect runs at once.
const collectGCs = 4

// sweepOrphans removes the pod dirs named like a pod id the journal does
// not hold, and their netns files too when withNetns.
//
// An orphan netns file is only unmounted and removed (netnsfile.Unbind),
// never flushed as a pod's teardown does (netnsfile.Remove): without its
// record kurmad cannot tell a namespace it made from its bind mount of a
// container runtime's (a runtime pod, Runtime), and flushing the latter
// would delete the runtime's own links. The networks' gc, which ran
// before, deleted what the plugins made; a namespace kurmad made dies with
// its mount, and its links with it.
func (m *Manager) sweepOrphans(withNetns bool, log logrus.FieldLogger) {
	known, err := m.journaledIDs()
	if err != nil {
		log.WithError(err).Warn("cannot list the journal: no orphan removed")
		return
	}
	orphans := m.sweep(m.opts.PodsDir, known, os.RemoveAll, log)
	if withNetns {
		orphans += m.sweep(m.opts.NetnsDir, known, netnsfile.Unbind, log)
	}
	if orphans > 0 {
		log.WithField("orphans", orphans).Info("orphans removed")
	}
}

// knownNetworks are the config's networks pods attach to (not the
// policy network), then the networks only journaled pods use or whose gc
// waits.
func (m *Manager) knownNetworks() []string {
	names := m.config().AttachNames()
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		m.log.WithError(err).Warn("cannot list the journal's networks")
	}
	for _, r := range recs {
		for _, a := range r.Attachments {
			if !a.Deleted && !slices.Contains(names, a.Network) {
				names = append(names, a.Network)
			}
		}
	}
	for _, n := range m.WaitingGCs() {
		if !slices.Contains(names, n) {
			names = append(names, n)
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
