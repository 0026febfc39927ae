package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/state"
)

// Why a runtime pod was found dropped by its runtime (the reason label of
// Options.RuntimeDropped).
const (
	// DroppedNetnsGone: the runtime's netns path names no namespace any
	// more (podman removed its /run/netns file, the container's process
	// behind /proc/<pid>/ns/net exited).
	DroppedNetnsGone = "netns_gone"
	// DroppedNetnsReplaced: the runtime's netns path names another
	// namespace than the pod's (the path was reused).
	DroppedNetnsReplaced = "netns_replaced"
)

// runtimeFate is what became of a ready runtime pod's container, as the
// runtime's netns path and kurmad's bind mount tell.
type runtimeFate int

const (
	// fateLive: the runtime's path names the pod's namespace, and
	// kurmad's bind mount holds it.
	fateLive runtimeFate = iota
	// fateUnbound: the runtime's path names the pod's namespace, but
	// kurmad's bind mount of it is lost (unmounted, a run dir without
	// propagation after a restart): the container lives.
	fateUnbound
	// fateDropped: the runtime's path names no namespace any more, or
	// another one, or the host rebooted since the ADD: the runtime dropped
	// the container without a DEL that reached kurmad.
	fateDropped
	// fateUnknown: kurmad cannot tell (the path cannot be read, or a
	// record without the namespace's identity lost its bind mount): it
	// does nothing.
	fateUnknown
)

// errNoIdentity: a runtime pod journaled by a kurmad that kept no
// identity of the runtime's namespace lost its bind mount, so nothing
// tells whether the runtime's path still names the pod's namespace.
var errNoIdentity = errors.New("the journal holds no identity of the runtime's namespace and kurmad's bind mount of it is lost")

// runtimeFateOf looks at ready runtime pod rec: the namespace the runtime's
// path names now against the one journaled at ADD (or, for a record that
// has none, the one kurmad's bind mount holds). A record of another boot
// than boot (this one's, "" when unknown) is dropped whatever the path
// names: every namespace went with the reboot, and the kernel gives their
// inodes (and the pids in /proc/<pid>/ns/net paths) to new ones, so a new
// namespace may match the journaled identity. For fateDropped, reason is
// one of the Dropped* values and why says it for a user.
func runtimeFateOf(rec *state.Pod, boot string) (fate runtimeFate, reason, why string, err error) {
	rt := rec.Runtime
	if rt.BootID != "" && boot != "" && rt.BootID != boot {
		return fateDropped, DroppedNetnsGone, fmt.Sprintf("the host rebooted since the runtime's ADD (boot %s, now %s): its netns %s went with it", rt.BootID, boot, rt.Netns), nil
	}
	want := netnsID(rt)
	// kurmad's bind mount holds the pod's namespace: the journaled one
	// (a mount of another one there is as good as lost: rebind replaces
	// it), or, for a record that journaled none, whatever it holds.
	bound := false
	if held, err := netnsfile.IdentifyMounted(rec.Netns); err == nil {
		if want.IsZero() {
			want = held
		}
		bound = held == want
	}
	got, err := netnsfile.Identify(rt.Netns)
	switch {
	case errors.Is(err, netnsfile.ErrNoNetns):
		return fateDropped, DroppedNetnsGone, fmt.Sprintf("the runtime's netns %s names no namespace any more", rt.Netns), nil
	case err != nil:
		return fateUnknown, "", "", err
	case want.IsZero():
		return fateUnknown, "", "", errNoIdentity
	case got != want:
		return fateDropped, DroppedNetnsReplaced, fmt.Sprintf("the runtime's netns %s names another namespace (%s, not the pod's %s)", rt.Netns, got, want), nil
	case !bound:
		return fateUnbound, "", "", nil
	}
	return fateLive, "", "", nil
}

// RuntimeCheck counts what CheckRuntimes found among the ready runtime
// pods.
type RuntimeCheck struct {
	// Live: the runtime's container is there; nothing done.
	Live int
	// Rebound: kurmad's lost bind mount was made again; the pod kept.
	Rebound int
	// Released: dropped by the runtime, and released (dels run, pod
	// removed).
	Released int
	// Waiting: dropped by the runtime; the release started but a del
	// waits or failed (retried in the background, as any teardown).
	Waiting int
	// Unknown: kurmad could not tell; nothing done (logged).
	Unknown int
}

// runtimeOutcome is what checkRuntimePod did with one pod.
type runtimeOutcome int

const (
	outcomeLive runtimeOutcome = iota
	outcomeRebound
	outcomeReleased
	outcomeWaiting
	outcomeUnknown
	outcomeSkipped // not a ready runtime pod (any more): not this check's
)

// CheckRuntimes looks at every ready runtime pod (kurmad runs it every
// runtime_check_interval; Reconcile does the same at boot):
//   - a pod whose runtime's netns path names no namespace any more, or
//     another one than journaled at ADD, was dropped by its runtime
//     without a DEL that reached kurmad (a DEL sent while kurmad was
//     down, swallowed, or never sent): kurmad journals why (Runtime's
//     Dropped, shown while the release runs), runs its dels as a Delete
//     does (its bind mount still holds the namespace, so the plugins
//     clean inside it) and removes it;
//   - a pod whose bind mount is lost while the runtime's path still names
//     its namespace is bound again: the container lives, and is never
//     torn down for kurmad's loss;
//   - otherwise nothing is done, and a pod kurmad cannot tell about is
//     left as it is and logged.
//
// Pods being created or deleted, and kurmad's own pods, are left alone.
func (m *Manager) CheckRuntimes(ctx context.Context) RuntimeCheck {
	var res RuntimeCheck
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		m.log.WithError(err).Error("runtime check: cannot list the journal")
		return res
	}
	for _, rec := range recs {
		if ctx.Err() != nil {
			break
		}
		if rec.Runtime == nil || rec.Phase != state.PhaseReady {
			continue
		}
		switch m.checkRuntimePod(ctx, rec.ID, "runtime-check") {
		case outcomeLive:
			res.Live++
		case outcomeRebound:
			res.Rebound++
		case outcomeReleased:
			res.Released++
		case outcomeWaiting:
			res.Waiting++
		case outcomeUnknown:
			res.Unknown++
		}
	}
	return res
}

// checkRuntimePod looks at runtime pod id under its lock and acts on its
// fate (see CheckRuntimes); op names the caller in logs.
func (m *Manager) checkRuntimePod(ctx context.Context, id, op string) runtimeOutcome {
	unlock := m.lockPod(id)
	defer unlock()
	rec, err := m.opts.Store.GetPod(id)
	if err != nil || rec.Runtime == nil || rec.Phase != state.PhaseReady || m.checkNetns(rec) != nil {
		return outcomeSkipped
	}
	rt := rec.Runtime
	log := m.log.WithFields(logrus.Fields{"pod": id, "op": op, "owner": rt.Owner, "container": rt.ContainerID,
		"cni_network": rt.Network, "runtime_netns": rt.Netns})
	fate, reason, why, err := runtimeFateOf(rec, m.bootID)
	switch fate {
	case fateLive:
		if netnsID(rt).IsZero() || (rt.BootID == "" && m.bootID != "") {
			m.journalIdentity(rec, log)
		}
		return outcomeLive
	case fateUnknown:
		log.WithError(err).Warn("cannot tell whether the runtime still has the container; the pod is left as it is")
		return outcomeUnknown
	case fateUnbound:
		if err := m.rebind(rec); err != nil {
			log.WithError(err).Warn("kurmad's bind mount of the runtime's namespace is lost and could not be made again; the pod is left as it is")
			return outcomeUnknown
		}
		if m.opts.RuntimeRebound != nil {
			m.opts.RuntimeRebound()
		}
		log.Info("kurmad's bind mount of a live runtime container's namespace was lost: bound again, the pod kept")
		return outcomeRebound
	}
	return m.release(ctx, rec, reason, why, op, log)
}

// journalIdentity completes the record of a live runtime pod journaled by
// a kurmad that kept no identity of the runtime's namespace, or no boot
// ID: kurmad's bind mount holds the pod's namespace, in this boot (no
// mount outlives one), so its identity is the one to keep. Without it a
// later loss of the bind mount, or a reboot, would leave the pod unknown
// for good.
func (m *Manager) journalIdentity(rec *state.Pod, log logrus.FieldLogger) {
	id, err := netnsfile.IdentifyMounted(rec.Netns)
	if err != nil {
		return
	}
	err = m.opts.Store.UpdatePod(rec.ID, func(p *state.Pod) error {
		if p.Runtime != nil {
			p.Runtime.NetnsDev, p.Runtime.NetnsIno, p.Runtime.BootID = id.Dev, id.Ino, m.bootID
		}
		return nil
	})
	if err != nil {
		log.WithError(err).Warn("cannot journal the identity of the runtime's namespace; tried again at the next check")
		return
	}
	log.WithField("netns_id", id).Info("identity of the runtime's namespace journaled for a pod an earlier kurmad made")
}

// rebind makes kurmad's bind mount of a runtime pod's namespace again,
// of the journaled namespace only; what is left at the pod's netns path
// (the file of the lost mount) goes first.
func (m *Manager) rebind(rec *state.Pod) error {
	if err := netnsfile.Unbind(rec.Netns); err != nil {
		return err
	}
	return netnsfile.BindExistingAs(rec.Runtime.Netns, rec.Netns, netnsID(rec.Runtime))
}

// release tears down a ready runtime pod its runtime dropped: journaled
// deleting with why (Runtime's Dropped), then its dels and removal as a
// Delete (teardown); a teardown that does not finish is kept and retried
// like any.
func (m *Manager) release(ctx context.Context, rec *state.Pod, reason, why, op string, log logrus.FieldLogger) runtimeOutcome {
	now := time.Now().UTC()
	err := m.opts.Store.UpdatePod(rec.ID, func(p *state.Pod) error {
		p.Phase = state.PhaseDeleting
		if p.Runtime != nil {
			p.Runtime.Dropped, p.Runtime.DroppedAt = why, now
		}
		return nil
	})
	if err != nil {
		log.WithError(err).Error("cannot journal the release of a dropped runtime pod; tried again at the next check")
		return outcomeUnknown
	}
	rec.Phase, rec.Runtime.Dropped, rec.Runtime.DroppedAt = state.PhaseDeleting, why, now
	if m.opts.RuntimeDropped != nil {
		m.opts.RuntimeDropped(reason)
	}
	log = log.WithField("reason", reason)
	log.WithField("why", why).Warn("the runtime dropped the container without a DEL that reached kurmad: releasing its pod")
	start := time.Now()
	if err := m.teardown(ctx, rec, op); err != nil {
		log.WithError(err).Warn("release incomplete; kept with its netns, retried in the background")
		return outcomeWaiting
	}
	log.WithField("duration", time.Since(start)).Info("dropped runtime pod released")
	return outcomeReleased
}

// bootIDPath holds the host's boot ID, new at every boot.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID is the host's boot ID, "" when it cannot be read (the records
// then journal none, and are told apart by their namespace alone).
func bootID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
