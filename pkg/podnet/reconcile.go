package podnet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/state"
)

// Reconcile brings the journal and the host back in line at boot, whatever
// instant the previous kurmad died at:
//   - ready pods whose netns is still a mounted namespace are adopted;
//   - ready pods whose netns vanished are torn down (del lets IPAM release
//     their addresses) and forgotten;
//   - but a ready runtime pod goes by its runtime's namespace, as
//     CheckRuntimes has it: adopted while the runtime's path names the
//     namespace journaled at ADD (its bind mount made again if it was
//     lost: the container lives), released when the path names no
//     namespace or another one (the runtime dropped it while kurmad was
//     away), and left as it is when kurmad cannot tell;
//   - half-made pods (creating) are rolled back: del for every attachment,
//     intent ones included, in reverse; netns and record removed. The
//     first attachment's intent is journaled with the pod's, before the
//     netns exists: its del then runs on a missing netns, which del
//     tolerates (IPAM releases whatever it may hold). Until that is done
//     they stay creating, which List does not show;
//   - pods being deleted, or whose teardown failed before, are deleted again;
//   - then Collect: every network's gc, with the journal's attachments as
//     the valid ones, releases what plugins hold for pods the journal does
//     not know (a lost or rebuilt journal), while their netns files still
//     exist; then netns files and pod dirs named like a pod id with no
//     record are removed (netns files only when every gc ran). The gc of
//     a network whose plugin container does not run yet waits for it, as
//     dels do, and the netns files wait for those gcs.
//
// Each teardown is tried once now. A del whose plugin container is not
// running yet (its image is still being fetched, say) is not run: the pod
// keeps its netns and waits, and RunRetries tries it again (at once when
// a container starts: Networks.Started). A del that fails leaves the pod
// failed, with the error, retried with backoff. Neither stops kurmad from booting:
// the error is for a journal that cannot be read.
func (m *Manager) Reconcile(ctx context.Context) error {
	start := time.Now()
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		return err
	}
	log := m.log.WithField("op", "reconcile")
	adopted, cleaned, waiting := 0, 0, 0
	for _, rec := range recs {
		l := log.WithFields(logrus.Fields{"pod": rec.ID, "phase": rec.Phase})
		if rec.Phase == state.PhaseReady && rec.Runtime != nil && m.checkNetns(rec) == nil {
			switch m.checkRuntimePod(ctx, rec.ID, "reconcile") {
			case outcomeLive, outcomeRebound, outcomeUnknown:
				adopted++
				l.Info("runtime pod adopted")
			case outcomeReleased:
				cleaned++
			case outcomeWaiting:
				waiting++
			}
			continue
		}
		if rec.Phase == state.PhaseReady && m.checkNetns(rec) == nil && netnsfile.IsMounted(rec.Netns) {
			adopted++
			l.Info("pod adopted")
			continue
		}
		why := map[state.Phase]string{
			state.PhaseReady:    "netns vanished: cleaning up",
			state.PhaseCreating: "half-made: rolling back",
			state.PhaseDeleting: "finishing delete",
			state.PhaseFailed:   "retrying failed teardown",
		}[rec.Phase]
		l.Info(why)
		if err := m.reconcileOne(ctx, rec); err != nil {
			l.WithError(err).Warn("cleanup incomplete; kept with its netns and tried again later")
			waiting++
			continue
		}
		cleaned++
	}
	m.mu.Lock()
	skip := m.bootSkip
	m.bootSkip = nil
	m.mu.Unlock()
	if cleaned > 0 || waiting > 0 {
		skip = nil // its teardowns ran, or wait: every gc runs
	}
	gcFailed := m.collect(ctx, skip)
	log.WithFields(logrus.Fields{"adopted": adopted, "cleaned": cleaned, "waiting": waiting, "gcFailed": gcFailed, "gcSkipped": len(skip), "duration": time.Since(start)}).Info("journal reconciled")
	return nil
}

// reconcileOne tears down a pod Reconcile does not adopt; a ready one is
// journaled deleting first: it is, and is listed so.
func (m *Manager) reconcileOne(ctx context.Context, rec *state.Pod) error {
	unlock := m.lockPod(rec.ID)
	defer unlock()
	if rec.Phase == state.PhaseReady {
		if err := m.opts.Store.SetPhase(rec.ID, state.PhaseDeleting, rec.Error); err != nil {
			return err
		}
		rec.Phase = state.PhaseDeleting
	}
	return m.teardown(ctx, rec, "reconcile")
}

// sweep removes entries of dir named like a pod id that the journal does
// not know; other names are left alone (they are not ours).
func (m *Manager) sweep(dir string, known map[string]bool, remove func(string) error, log logrus.FieldLogger) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.WithError(err).Warn("cannot list " + dir)
		}
		return 0
	}
	n := 0
	for _, e := range entries {
		if known[e.Name()] || uuid.Validate(e.Name()) != nil || m.creating(e.Name()) {
			continue
		}
		// After creating: a create that ended before it journaled its pod.
		if _, err := m.opts.Store.GetPod(e.Name()); err == nil {
			continue // journaled since the listing
		}
		p := filepath.Join(dir, e.Name())
		if err := remove(p); err != nil {
			log.WithError(err).WithField("path", p).Warn("cannot remove orphan")
			continue
		}
		log.WithField("path", p).Info("orphan removed")
		n++
	}
	return n
}

// creating reports whether a create of pod id is under way: its netns and
// dir are made beside the commit of its intent (see prepare), so they may
// exist before the journal holds the pod.
func (m *Manager) creating(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.inflight[id]
	return ok
}
