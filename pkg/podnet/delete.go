package podnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// Delete tears a pod down: del for every attachment in reverse order with
// the config snapshot taken at add time (so a network edited or removed
// from the config since still detaches), each in the generation of the
// network's plugin container that served its add, every one attempted even
// when one fails; then the netns is unmounted and removed, and the pod's
// dir. The journal record goes only when all of that succeeded; otherwise
// the pod stays with its netns and the error, is tried again in the
// background (RunRetries), and a later Delete retries it at once.
//
// Deleting an id the journal does not hold (never created, or already
// deleted) returns ErrNotFound: a second Delete of the same pod is harmless
// and callers that want idempotence treat ErrNotFound as done.
//
// A Delete of a pod whose create is under way waits for the create to end
// (see lockAfterCreate), then removes the pod it made, or answers
// ErrNotFound when the create failed and rolled back.
func (m *Manager) Delete(ctx context.Context, id string) error {
	unlock := m.lockAfterCreate(id, "delete")
	defer unlock()
	rec, err := m.beginDelete(id)
	if err != nil {
		return err
	}
	start := time.Now()
	failpoint("after-delete-intent", "")
	log := m.log.WithFields(logrus.Fields{"pod": id, "op": "delete"})
	if err := m.teardown(ctx, rec, "delete"); err != nil {
		log.WithError(err).WithField("duration", time.Since(start)).Warn("delete incomplete; kept with its netns, retried in the background")
		return fmt.Errorf("pod %s: delete incomplete (kept with its netns; kurmad retries it, or delete it again, or remove it with force): %w", id, err)
	}
	log.WithField("duration", time.Since(start)).Info("pod deleted")
	return nil
}

// lockAfterCreate is lockPod for a delete. A create holds its pod's lock
// from before the pod is journaled (and so listed) until it ends, so a
// delete of a pod being created waits for it rather than answering "not
// found" while the pod is created anyway. The wait, as long as the
// create's adds, is logged: it is what an operator sees a slow rm wait for.
func (m *Manager) lockAfterCreate(id, op string) (unlock func()) {
	if m.creating(id) {
		m.log.WithFields(logrus.Fields{"pod": id, "op": op}).Info("waiting for the pod's create under way to end")
	}
	return m.lockPod(id)
}

// beginDelete reads pod id and journals that it is being deleted.
func (m *Manager) beginDelete(id string) (*state.Pod, error) {
	rec, err := m.opts.Store.GetPod(id)
	if errors.Is(err, state.ErrNotFound) {
		return nil, fmt.Errorf("pod %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if rec.Phase != state.PhaseCreating {
		if err := m.opts.Store.SetPhase(id, state.PhaseDeleting, rec.Error); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// Leftover is an attachment whose del did not succeed when its pod was
// removed by force: what its plugin made may still be there (the host end
// of its interface, its IP lease, NAT rules).
type Leftover struct {
	Network    string
	Generation int
	Interface  string
	Err        error
}

// ForceDelete removes a pod even when dels fail: every del not yet done is
// attempted once more, as by Delete; then the netns, the pod's dir and
// the record are removed whatever they answered. It returns the
// attachments whose del did not succeed, for the caller to report. Their
// networks owe a gc (GC, which knows what is still valid, cleans what the
// dels left): the caller runs it (GC), else it waits as a gc whose
// network does not run does (see GC), and the generations those
// attachments were made in stay held for it (gcHolder).
func (m *Manager) ForceDelete(ctx context.Context, id string) ([]Leftover, error) {
	unlock := m.lockAfterCreate(id, "force")
	defer unlock()
	rec, err := m.beginDelete(id)
	if err != nil {
		return nil, err
	}
	log := m.log.WithFields(logrus.Fields{"pod": id, "op": "force"})
	if err := m.checkNetns(rec); err != nil {
		// Not kurmad's netns: nothing is run or removed there, only the
		// record goes.
		if err := m.opts.Store.DeletePod(id); err != nil && !errors.Is(err, state.ErrNotFound) {
			return nil, err
		}
		m.retries.drop(id)
		m.forget(rec)
		log.WithError(err).Warn("record of a pod whose netns is not kurmad's removed by force; nothing else touched")
		return []Leftover{{Err: err}}, nil
	}
	_, failed := m.runDels(ctx, rec, "force", log)
	owed := make([]netplugin.Target, 0, len(failed))
	for _, f := range failed {
		a := rec.Attachments[f.idx]
		owed = append(owed, target(a))
	}
	m.oweGC(owed)
	if err := m.removePod(rec, len(failed) > 0); err != nil {
		return nil, fmt.Errorf("pod %s: %w", id, err)
	}
	m.retries.drop(id)
	var left []Leftover
	for _, f := range failed {
		a := rec.Attachments[f.idx]
		left = append(left, Leftover{Network: a.Network, Generation: a.Generation, Interface: a.Interface, Err: f.err})
		log.WithFields(logrus.Fields{"network": a.Network, "interface": a.Interface}).WithError(f.err).
			Warn("pod removed by force; its del did not succeed and may have left the interface's host side, IP lease or NAT rules")
	}
	log.WithField("left", len(left)).Info("pod removed by force")
	return left, nil
}
