package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/cniresult"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// PodCheck is the outcome of a pod's check.
type PodCheck struct {
	Time time.Time
	// Degraded is set when a network's plugin said its attachment is not
	// as its add left it (a CheckFailed network).
	Degraded    bool
	Attachments []AttachmentCheck
}

// AttachmentCheck is one attachment's check outcome.
type AttachmentCheck struct {
	Network   string
	Interface string
	// Outcome is one of the Check* values.
	Outcome string
	// Message is the plugin's message (failed), why there was no answer
	// (unknown) or why it was not asked (skipped).
	Message string
}

// Check outcomes.
const (
	// CheckPassed: the plugin's check succeeded.
	CheckPassed = "passed"
	// CheckFailed: the plugin answered with a CNI error: the pod is
	// degraded.
	CheckFailed = "failed"
	// CheckUnknown: no verdict: the network is not running, the call timed
	// out, or the plugin failed without a CNI error object.
	CheckUnknown = "unknown"
	// CheckSkipped: not asked, or not answerable: the image has no
	// /opt/network/check, or the config's CNI version has no CHECK (CNI
	// error 1 from the plugin).
	CheckSkipped = "skipped"
)

// Check runs each attachment's /opt/network/check in the generation that
// served its add, with its config snapshot and the result the add gave as
// prevResult, and returns the pod's record and the outcome, which
// LastCheck gives from then on (in memory only: a restarted kurmad shows
// no outcome until the next check). A pod is degraded while a plugin says its
// attachment is broken, and ready again once every check passes; a network
// that gives no verdict (CheckUnknown) keeps its last one for the pod's
// state. Only a ready pod is checked (ErrPodNotReady otherwise); calls for
// one pod are serial, as for Create and Delete.
func (m *Manager) Check(ctx context.Context, id string) (*state.Pod, *PodCheck, error) {
	unlock := m.lockPod(id)
	defer unlock()
	rec, err := m.Get(id)
	if err != nil {
		return nil, nil, err
	}
	if rec.Phase != state.PhaseReady {
		return nil, nil, fmt.Errorf("pod %s is %s: %w", id, rec.Phase, ErrPodNotReady)
	}
	start := time.Now()
	prev := m.LastCheck(id)
	res := &PodCheck{Time: start.UTC(), Attachments: make([]AttachmentCheck, 0, len(rec.Attachments))}
	for _, a := range rec.Attachments {
		nc := m.checkAttachment(ctx, rec, a)
		res.Degraded = res.Degraded || nc.Outcome == CheckFailed || (nc.Outcome == CheckUnknown && prev.failed(nc.Network))
		res.Attachments = append(res.Attachments, nc)
	}
	m.setCheck(id, res)
	log := m.log.WithFields(logrus.Fields{"pod": id, "op": "check", "duration": time.Since(start)})
	switch wasDegraded := prev != nil && prev.Degraded; {
	case res.Degraded && !wasDegraded:
		log.WithField("networks", res.failures()).Warn("pod degraded: a plugin's check failed")
	case !res.Degraded && wasDegraded:
		log.Info("pod ready again: every check passed")
	default:
		log.WithField("degraded", res.Degraded).Debug("pod checked")
	}
	return rec, res, nil
}

// checkAttachment checks one attachment.
func (m *Manager) checkAttachment(ctx context.Context, rec *state.Pod, a state.Attachment) AttachmentCheck {
	nc := AttachmentCheck{Network: a.Network, Interface: a.Interface}
	if p, ok := m.opts.Exec.(Provider); ok && !p.Provides(a.Network, a.Generation, netplugin.CheckPath) {
		nc.Outcome, nc.Message = CheckSkipped, "the network's image has no "+netplugin.CheckPath
		return nc
	}
	stdin, err := checkConfig(a)
	if err != nil {
		nc.Outcome, nc.Message = CheckUnknown, err.Error()
		return nc
	}
	start := time.Now()
	_, stderr, err := m.opts.Exec.Exec(ctx, netplugin.NewCall(target(a), netplugin.CheckPath, pluginArgs(rec, a.Interface), stdin))
	l := m.log.WithFields(logrus.Fields{"pod": rec.ID, "network": a.Network, "generation": a.Generation, "op": "check", "duration": time.Since(start)})
	if len(stderr) > 0 {
		l = l.WithField("stderr", stderrTail(stderr))
	}
	var cniErr *types.Error
	switch {
	case err == nil:
		nc.Outcome = CheckPassed
	case errors.As(err, &cniErr) && cniErr.Code == types.ErrIncompatibleCNIVersion:
		nc.Outcome, nc.Message = CheckSkipped, "the plugin cannot check this config: "+cniErr.Msg
	case errors.As(err, &cniErr):
		nc.Outcome, nc.Message = CheckFailed, cniErr.Msg
		if cniErr.Details != "" {
			nc.Message += ": " + cniErr.Details
		}
		l.WithError(err).Warn("check failed")
	default:
		nc.Outcome, nc.Message = CheckUnknown, err.Error()
		l.WithError(err).Warn("check gave no verdict")
	}
	return nc
}

// checkConfig is check's stdin: the attachment's config snapshot with the
// add's result as prevResult, in the version the config declares (as
// stored, CNI 1.1.0, when it declares none).
func checkConfig(a state.Attachment) ([]byte, error) {
	if a.Phase != state.AttachDone || len(a.Result) == 0 {
		return nil, errors.New("the attachment has no result to check against")
	}
	prev := json.RawMessage(a.Result)
	var decl struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(a.Config, &decl); err == nil && decl.CNIVersion != "" {
		res, err := cniresult.Parse(a.Result, "")
		if err != nil {
			return nil, fmt.Errorf("journaled result: %w", err)
		}
		conv, err := res.GetAsVersion(decl.CNIVersion)
		if err != nil {
			return nil, fmt.Errorf("journaled result as %s: %w", decl.CNIVersion, err)
		}
		if prev, err = json.Marshal(conv); err != nil {
			return nil, err
		}
	}
	conf, err := netconfig.WithKey(a.Config, "prevResult", prev)
	if err != nil {
		return nil, netplugin.WrapNetworkError(a.Network, netplugin.CheckPath, err)
	}
	return conf, nil
}

// failed reports whether network's check failed in r (nil: no check).
func (r *PodCheck) failed(network string) bool {
	if r == nil {
		return false
	}
	for _, n := range r.Attachments {
		if n.Network == network {
			return n.Outcome == CheckFailed
		}
	}
	return false
}

// failures names the networks whose check failed, with their messages.
func (r *PodCheck) failures() []string {
	var out []string
	for _, n := range r.Attachments {
		if n.Outcome == CheckFailed {
			out = append(out, n.Network+": "+n.Message)
		}
	}
	return out
}

// LastCheck is pod id's last check, nil when it was not checked since
// kurmad started. It is shared: read it, never change it.
func (m *Manager) LastCheck(id string) *PodCheck {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checks[id]
}

// setCheck records pod id's last check.
func (m *Manager) setCheck(id string, res *PodCheck) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks[id] = res
}

// forgetCheck drops the check of a pod that is gone.
func (m *Manager) forgetCheck(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.checks, id)
}

// CheckAll checks every ready pod, one after the other (kurmad's periodic
// check); it returns how many are degraded.
func (m *Manager) CheckAll(ctx context.Context) int {
	degraded := 0
	for _, p := range m.List() {
		if ctx.Err() != nil {
			break
		}
		if p.Phase != state.PhaseReady {
			continue
		}
		_, c, err := m.Check(ctx, p.ID)
		if err != nil {
			if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrPodNotReady) {
				m.log.WithField("pod", p.ID).WithError(err).Warn("periodic check")
			}
			continue
		}
		if c.Degraded {
			degraded++
		}
	}
	return degraded
}
