package podnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/state"
)

// Delete tears a pod down: del for every attachment in reverse order with
// the config snapshot taken at add time (so a network edited or removed
// from the config since still detaches), every one attempted even when one
// fails; then the netns is unmounted and removed, and the pod's dir. The
// journal record goes only when all of that succeeded; otherwise the pod
// stays, phase failed with the error, and a later Delete retries.
//
// Deleting an id the journal does not hold (never created, or already
// deleted) returns ErrNotFound: a second Delete of the same pod is harmless
// and callers that want idempotence treat ErrNotFound as done.
func (m *Manager) Delete(ctx context.Context, id string) error {
	unlock := m.lockPod(id)
	defer unlock()
	rec, err := m.opts.Store.GetPod(id)
	if errors.Is(err, state.ErrNotFound) {
		return fmt.Errorf("pod %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	if err := m.opts.Store.SetPhase(id, state.PhaseDeleting, rec.Error); err != nil {
		return err
	}
	failpoint("after-delete-intent", "")
	log := m.log.WithFields(logrus.Fields{"pod": id, "op": "delete"})
	if err := m.teardown(ctx, rec, "delete"); err != nil {
		log.WithError(err).WithField("duration", time.Since(start)).Warn("delete incomplete; kept for a retry")
		return fmt.Errorf("pod %s: delete incomplete (kept; delete again to retry): %w", id, err)
	}
	log.WithField("duration", time.Since(start)).Info("pod deleted")
	return nil
}
