package podnet

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// delFailure is one attachment whose del did not succeed.
type delFailure struct {
	idx int // in rec.Attachments
	err error
	// notRun: the del did not run because its generation's container is
	// not running (ErrUnavailable): waiting, not failing.
	notRun bool
}

// runDels runs the del of every attachment of rec not yet deleted, in
// reverse order (intent ones too: the plugin may have made something
// before dying), each in the generation that served its add and with its
// snapshot config, every one attempted. It returns the attachments whose
// del succeeded and those whose del did not. Only in a Create's rollback is
// the del of the network whose add just failed best effort: it counts as
// done whatever it answers.
func (m *Manager) runDels(ctx context.Context, rec *state.Pod, op string, log logrus.FieldLogger) (done []int, failed []delFailure) {
	for i := len(rec.Attachments) - 1; i >= 0; i-- {
		a := rec.Attachments[i]
		if a.Deleted {
			continue
		}
		if a.Interface == "" && a.Phase == state.AttachIntent && rec.Runtime == nil {
			if guess := unclaimedLink(rec); guess != "" {
				log.WithFields(logrus.Fields{"network": a.Network, "interface": guess}).Info("add did not finish; deleting the interface it left")
				a.Interface = guess
			}
		}
		dctx, cancel := m.teardownContext(ctx)
		start := time.Now()
		_, stderr, err := m.opts.Exec.Exec(dctx, netplugin.NewCall(target(a), netplugin.DelPath, pluginArgs(rec, a.Interface), a.Config))
		cancel()
		l := log.WithFields(logrus.Fields{"network": a.Network, "generation": a.Generation, "interface": a.Interface, "duration": time.Since(start)})
		if len(stderr) > 0 {
			l = l.WithField("stderr", stderrTail(stderr))
		}
		switch {
		case err != nil && op == "rollback" && a.Phase == state.AttachIntent:
			// The add of this network just failed in this process: its del
			// is best effort. A plugin that rejects its config rejects it
			// on del too, and keeping the pod for a retry with the same
			// snapshot would keep it forever; its links go with the netns.
			l.WithError(err).Warn("del after a failed add failed too; ignored")
		case errors.Is(err, netplugin.ErrUnavailable):
			l.WithError(err).Info("del waits for the network's plugin container to run")
			failed = append(failed, delFailure{idx: i, err: netplugin.WrapNetworkError(a.Network, netplugin.DelPath, err), notRun: true})
			continue
		case err != nil:
			l.WithError(err).Warn("del failed")
			failed = append(failed, delFailure{idx: i, err: netplugin.WrapNetworkError(a.Network, netplugin.DelPath, err)})
			continue
		default:
			l.Debug("network detached")
		}
		done = append(done, i)
		if op == "delete" {
			failpoint("after-del", a.Network)
		}
	}
	return done, failed
}

// teardown dels every attachment (runDels); when every del succeeded it
// removes the netns, the pod's dir and the record. Otherwise the netns and
// the record stay, so that the dels still to run find the pod's interfaces
// (a del on a missing netns leaves the host side of a plugin's work, such
// as a masquerade rule, behind): the dels that succeeded are journaled as
// deleted, and the pod keeps its phase while its dels only wait for their
// plugin containers to run, or becomes failed, with the error; RunRetries
// tries it again with backoff.
func (m *Manager) teardown(ctx context.Context, rec *state.Pod, op string) error {
	log := m.log.WithFields(logrus.Fields{"pod": rec.ID, "op": op})
	if err := m.checkNetns(rec); err != nil {
		m.keep(rec, op, nil, []delFailure{{idx: -1, err: err}}, log)
		return err
	}
	done, failed := m.runDels(ctx, rec, op, log)
	if len(failed) > 0 {
		err := joinFailures(failed)
		m.keep(rec, op, done, failed, log)
		return err
	}
	if err := m.removePod(rec, false); err != nil {
		m.keep(rec, op, nil, []delFailure{{idx: -1, err: err}}, log)
		return err
	}
	m.retries.drop(rec.ID)
	return nil
}

// removePod removes what kurmad made for a pod whose dels are over (or
// given up): its netns (for a runtime's pod only kurmad's bind mount, see
// removeNetns), its dir and its record. The links left in a namespace
// kurmad made, and the pod's dir, go before it returns when flushNow (dels
// failed: what they left must be off the host's bridges at once), else in
// the background, off the caller's answer (see netnsfile.Release and
// Wait).
func (m *Manager) removePod(rec *state.Pod, flushNow bool) error {
	var errs []error
	flush, err := releaseNetns(rec)
	if err != nil {
		errs = append(errs, err)
	}
	if flushNow || err != nil {
		flush()
		if err := m.removePodDir(rec.ID); err != nil {
			errs = append(errs, err)
		}
	} else {
		// The pod's dir goes after the answer too: nothing reads it once
		// the pod is gone, and its id (a UUID kurmad chose) is never
		// reused; on a disk /run an rmdir costs a journal write. One that
		// kurmad dies before is an orphan the next boot's Collect removes.
		m.afterAnswer(func() {
			flush()
			if err := m.removePodDir(rec.ID); err != nil {
				m.log.WithError(err).WithField("pod", rec.ID).Warn("cannot remove the deleted pod's dir; the next boot removes it")
			}
		})
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := m.opts.Store.DeletePod(rec.ID); err != nil && !errors.Is(err, state.ErrNotFound) {
		return err
	}
	m.forget(rec)
	return nil
}

func joinFailures(failed []delFailure) error {
	errs := make([]error, len(failed))
	for i, f := range failed {
		errs[i] = f.err
	}
	return errors.Join(errs...)
}

// keep journals a teardown that could not finish: the attachments whose
// del succeeded are marked deleted (a retry runs only the others); the pod
// stays in its phase (creating, hidden; deleting) when its dels only wait
// for plugin containers to run, and becomes failed otherwise (and after a
// Create's rollback, which its caller reports); the error is kept for
// users to see. The pod is scheduled for a retry.
func (m *Manager) keep(rec *state.Pod, op string, done []int, failed []delFailure, log logrus.FieldLogger) {
	waiting := op != "rollback"
	for _, f := range failed {
		waiting = waiting && f.notRun
	}
	msg := joinFailures(failed).Error()
	err := m.opts.Store.UpdatePod(rec.ID, func(p *state.Pod) error {
		for _, i := range done {
			if i < len(p.Attachments) && p.Attachments[i].Network == rec.Attachments[i].Network {
				p.Attachments[i].Deleted = true
			}
		}
		if !waiting {
			p.Phase = state.PhaseFailed
		}
		p.Error = strings.ReplaceAll(msg, "\n", "; ")
		return nil
	})
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		log.WithError(err).Error("cannot journal the unfinished teardown")
	} else {
		// Their dels succeeded: they hold their generations no more.
		var deleted []state.Attachment
		for _, i := range done {
			deleted = append(deleted, rec.Attachments[i])
		}
		m.opts.Networks.Release(rec.ID, targets(deleted)...)
	}
	if errors.Is(failed[0].err, ErrForeignNetns) {
		return // never retried: kurmad will not touch it
	}
	m.retries.failed(rec.ID)
}
