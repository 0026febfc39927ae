package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/cniresult"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// maxPodName caps a pod's free-form name.
const maxPodName = 253

type wanted struct {
	net     *netconfig.Network
	args    []netconfig.Arg
	rc      netconfig.RuntimeConfig
	ifname  string // the interface the request names, or ""
	ref     string
	serving netplugin.Serving
}

// retainTries bounds how often begin asks Serving again when a
// generation they named stopped before the create could hold it (a
// reload retired it meanwhile).
const retainTries = 3

// begin resolves a create of pod id against the networks new pods attach
// to now, refuses a network whose serving generation cannot serve adds,
// holds (Retain) the generations it will use, for id, and claims the
// pod's name (or a generated one); end releases what the pod's record
// does not hold.
func (m *Manager) begin(id string, req CreateRequest) ([]wanted, string, error) {
	nets := m.opts.Networks
	var wants []wanted
	var targets []netplugin.Target
	for try := 1; ; try++ {
		cfg, serving := nets.Serving()
		var err error
		if wants, err = resolveRequest(cfg, req); err != nil {
			return nil, "", err
		}
		targets = make([]netplugin.Target, len(wants))
		for i := range wants {
			wants[i].serving = serving[wants[i].net.Name]
			targets[i] = wants[i].serving.Target
			if err := nets.Ready(targets[i]); err != nil {
				return nil, "", netplugin.WrapNetworkError(targets[i].Network, "", err)
			}
		}
		err = nets.Retain(id, targets...)
		if err == nil {
			break
		}
		if !errors.Is(err, netplugin.ErrUnknownGeneration) || try == retainTries {
			return nil, "", err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	name := req.Name
	if req.Runtime == nil {
		var err error
		if name, err = m.claimName(req.Name, id); err != nil {
			nets.Release(id, targets...)
			return nil, "", err
		}
	}
	m.inflight[id] = targets
	return wants, name, nil
}

// end ends the create of pod id: the generations begin held that rec (the
// pod's record as the create left it, nil when none was journaled) has no
// attachment of are released; those it has stay held until their dels
// succeed (see forget, keep).
func (m *Manager) end(id string, rec *state.Pod) {
	m.mu.Lock()
	targets := m.inflight[id]
	delete(m.inflight, id)
	m.mu.Unlock()
	var unused []netplugin.Target
	for _, t := range targets {
		if rec == nil || !slices.ContainsFunc(rec.Attachments, func(a state.Attachment) bool { return a.Network == t.Network }) {
			unused = append(unused, t)
		}
	}
	if len(unused) > 0 {
		m.opts.Networks.Release(id, unused...)
	}
}

// resolve maps the request's network references onto cfg.
func resolve(cfg *netconfig.Config, req CreateRequest) ([]wanted, error) {
	if len(req.Name) > maxPodName || strings.ContainsFunc(req.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, fmt.Errorf("%w: pod name must be at most %d printable characters", ErrBadRequest, maxPodName)
	}
	if len(req.Networks) == 0 {
		defs := cfg.Defaults()
		if len(defs) == 0 {
			return nil, fmt.Errorf("%w: no networks requested and no network is marked default (known networks: %s)",
				ErrBadRequest, known(cfg))
		}
		out := make([]wanted, 0, len(defs))
		for _, n := range defs {
			out = append(out, wanted{net: n, ref: n.Name})
		}
		return out, nil
	}
	seen := map[string]bool{}
	out := make([]wanted, 0, len(req.Networks))
	for _, ref := range req.Networks {
		name, args, err := netconfig.ParseNetworkRef(ref)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		n, ok := cfg.Network(name)
		if !ok {
			return nil, fmt.Errorf("%w %q (known networks: %s)", netplugin.ErrUnknownNetwork, name, known(cfg))
		}
		if n.IsPolicy() {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, policyNetworkError(name))
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: network %q is requested twice", ErrBadRequest, name)
		}
		seen[name] = true
		out = append(out, wanted{net: n, args: args, ref: ref})
	}
	return out, nil
}

// resolveRequest is resolve, plus the capability arguments and the
// interface name of each network, which must name networks the pod joins.
func resolveRequest(cfg *netconfig.Config, req CreateRequest) ([]wanted, error) {
	wants, err := resolve(cfg, req)
	if err != nil {
		return nil, err
	}
	for name := range req.RuntimeConfig {
		i := slices.IndexFunc(wants, func(w wanted) bool { return w.net.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: capability arguments for network %q, which the pod does not join", ErrBadRequest, name)
		}
		wants[i].rc = req.RuntimeConfig[name]
	}
	for name, ifname := range req.Interfaces {
		i := slices.IndexFunc(wants, func(w wanted) bool { return w.net.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: an interface name for network %q, which the pod does not join", ErrBadRequest, name)
		}
		if msg := netconfig.CheckInterfaceName(ifname); msg != "" {
			return nil, fmt.Errorf("%w: the interface name for network %q: %s", ErrBadRequest, name, msg)
		}
		wants[i].ifname = ifname
	}
	return wants, nil
}

// policyNetworkError is the refusal of a pod that names the policy
// network.
func policyNetworkError(name string) error {
	return fmt.Errorf("network %q enforces policy (role %q); pods do not attach to it", name, netconfig.RolePolicy)
}

// known lists the networks a pod may name.
func known(cfg *netconfig.Config) string {
	names := cfg.AttachNames()
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Create makes a pod: journal intent and, beside it, the netns with lo up
// (see prepare), then every network in order. On any failure everything
// made so far (the failing network's attachment included) is torn down in
// reverse and the returned error names the network and wraps the plugin's
// error.
//
// The journal is written N+1 times for N networks, each write made before
// the step it guards (so a kill -9 loses none) and each intent synced
// before its add (so a power cut loses none; see docs/pods.md): the pod's
// intent together with its first attachment's intent (before the first
// add; the netns is made, or a runtime's bound, while it syncs: a crash
// before the write leaves an orphan netns file, which the next boot's
// Collect removes, and one after it a creating pod whose del may find no
// netns, which del tolerates); then, after each add,
// that attachment's result together with the next one's intent (before the
// next add); the last result goes together with the ready phase, unsynced
// (a power cut takes the pod's namespace with it, and reconcile releases
// a creating pod as it would a ready one whose namespace is gone). At every
// instant a crash leaves either a creating pod whose every add that may
// have run is journaled (intent or done), which Reconcile rolls back, or a
// ready pod, which it adopts.
//
// A pod without a name gets a generated one; a name another pod holds is
// refused with ErrNameInUse. A runtime's pod keeps the name the runtime
// gave (none, or its container's) and is outside that rule (see names.go).
//
// It returns the pod's journal record, as journaled ready.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (*state.Pod, error) {
	netnsID, err := checkRuntime(req.Runtime)
	if err != nil {
		return nil, err
	}
	if req.Runtime != nil {
		unlockRuntime, err := m.claimRuntime(req.Runtime)
		if err != nil {
			return nil, err
		}
		defer unlockRuntime()
	}
	id := uuid.NewString()
	wants, name, err := m.begin(id, req)
	if err != nil {
		return nil, err
	}
	var journaled *state.Pod // the record as journaled, once it is
	defer func() { m.end(id, journaled) }()
	unlock := m.lockPod(id)
	defer unlock()
	start := time.Now()
	log := m.log.WithFields(logrus.Fields{"pod": id, "op": "create"})

	refs := make([]string, len(wants))
	for i, w := range wants {
		refs[i] = w.ref
	}
	rec := &state.Pod{ID: id, Name: name, Netns: m.netnsPath(id), Networks: refs,
		Created: time.Now().UTC(), Phase: state.PhaseCreating, Runtime: toStateRuntime(req.Runtime, netnsID, m.bootID)}
	namer := netconfig.NewInterfaceNamer(id)
	if len(wants) > 0 {
		// The first intent is journaled before the netns is made (or, for
		// a runtime's pod, bound), so its links are read where they are.
		linksPath := rec.Netns
		if rec.Runtime != nil {
			linksPath = rec.Runtime.Netns
		}
		first, err := m.intent(wants[0], namer, linksPath, rec)
		if err != nil {
			m.releaseName(id, name)
			return nil, fmt.Errorf("create pod: %w", err)
		}
		rec.Attachments = []state.Attachment{first}
	}
	prep := m.prepare(rec)
	failpointAfter("netns-before-intent", prep.wait)
	if err := m.opts.Store.PutPod(rec); err != nil {
		m.releaseName(id, name)
		if uerr := m.unprepare(prep, rec); uerr != nil {
			log.WithError(uerr).Warn("cannot remove the netns made beside the intent that was not journaled; the next boot's gc removes it")
		}
		return nil, err
	}
	journaled = rec
	failpoint("after-pod-intent", "")

	if err := m.create(ctx, rec, wants, namer, prep, log); err != nil {
		err = fmt.Errorf("create pod: %w", err)
		log.WithError(err).WithField("duration", time.Since(start)).Warn("create failed; rolling back")
		if rbErr := m.teardown(ctx, rec, "rollback"); rbErr != nil {
			log.WithError(rbErr).Error("rollback incomplete; the pod stays as failed for a later delete")
			return nil, fmt.Errorf("%w (rollback incomplete, pod %s kept for a later delete: %v)", err, id, rbErr)
		}
		return nil, err
	}
	log.WithFields(logrus.Fields{"duration": time.Since(start), "networks": len(wants)}).Info("pod created")
	return rec, nil
}

// create does the making; rec.Attachments follows the journal, except
// that an attachment whose add succeeded is marked done in rec before the
// journal says so (a rollback then treats its del as one that matters).
// On success the pod is journaled ready.
func (m *Manager) create(ctx context.Context, rec *state.Pod, wants []wanted, namer *netconfig.InterfaceNamer, prep *prepared, log logrus.FieldLogger) error {
	// The intent is synced while the netns is made and the add's
	// processes start: a power cut before the add acts must leave it in
	// the journal, since what the add writes on disk (an IP lease)
	// outlives the namespace. The add is held until the sync is done
	// (syncHold): its processes get their config only then.
	hold := m.syncHold()
	// Whatever ends the create, the pod's dir is made (or failed) by the
	// time it returns: a rollback removes it after.
	defer func() { _ = prep.waitDir() }()
	if err := prep.waitNetns(); err != nil {
		_ = hold()
		return err
	}
	failpoint("after-netns", "")

	var dns *current.Result
	for i, w := range wants {
		if err := ctx.Err(); err != nil {
			return &netplugin.NetworkError{Network: w.net.Name, Op: "not attached", Err: err}
		}
		res, done, alog, err := m.attach(ctx, rec, i, w, hold, log)
		if herr := hold(); herr != nil {
			// The add was cancelled before it read its config (or never
			// ran): the intent is not known to be durable.
			return &netplugin.NetworkError{Network: w.net.Name, Op: "journal", Err: herr}
		}
		if err != nil {
			return err
		}
		if dns == nil && !res.DNS.IsEmpty() {
			dns = res
		}
		last := i == len(wants)-1
		var next state.Attachment
		if last {
			if err := prep.waitDir(); err != nil {
				return err
			}
			if err := m.writeResolvConf(rec, dns); err != nil {
				return err
			}
			failpoint("before-ready", "")
		} else {
			nw := wants[i+1].net.Name
			if err := ctx.Err(); err != nil {
				return &netplugin.NetworkError{Network: nw, Op: "not attached", Err: err}
			}
			if next, err = m.intent(wants[i+1], namer, rec.Netns, rec); err != nil {
				return err
			}
		}
		if err := m.opts.Store.UpdatePod(rec.ID, func(p *state.Pod) error {
			p.SetAttachment(done)
			if last {
				p.Phase = state.PhaseReady
			} else {
				p.SetAttachment(next)
			}
			return nil
		}); err != nil {
			// The add's result is not journaled: the rollback dels it
			// (rec says done) rather than leave what a restart would
			// roll back anyway.
			return &netplugin.NetworkError{Network: w.net.Name, Op: "journal", Err: err}
		}
		if last {
			rec.Phase = state.PhaseReady
		} else {
			rec.Attachments = append(rec.Attachments, next)
			hold = m.syncHold()
		}
		alog.WithField("interface", done.Interface).Info("network attached")
	}
	return nil
}

// syncHold starts a journal sync and returns the hold of the next add
// (netplugin.Call.HeldUntil): it waits for that sync, and returns its
// error to every caller.
func (m *Manager) syncHold() func() error {
	done := make(chan error, 1)
	go func() { done <- m.opts.Store.Sync() }()
	return sync.OnceValue(func() error { return <-done })
}

// runtimeInterface is the name a runtime pod's next attachment must take:
// the runtime's CNI_IFNAME names the interface it asked for, which goes to
// the first network that makes one (not to a loopback network); "" once
// an attachment of rec has it, and for kurmad's own pods.
func runtimeInterface(rec *state.Pod) string {
	if rec.Runtime == nil {
		return ""
	}
	for _, a := range rec.Attachments {
		if a.Interface == rec.Runtime.Interface {
			return ""
		}
	}
	return rec.Runtime.Interface
}

// interfaceArgs are the CNI_ARGS keys a runtime gives for the interface
// it names (podman's --ip and --mac): they belong to the network that
// takes it, and would make another network's host-local refuse an address
// outside its range.
var interfaceArgs = []string{"IP", "MAC"}

// intent is the journal record of w's attachment to rec before its add:
// the interface name, the exact config add will get, and the image running
// the plugin. The name is the runtime's CNI_IFNAME when rec is a runtime's
// pod and w is the first network to make an interface (see
// runtimeInterface), which alone gets the runtime's interfaceArgs; else
// the network's template or the first free ethN; either way it is free
// among the links of the pod's netns at netnsPath, read now, right before
// the add (see linksBefore), and those kurma gave.
func (m *Manager) intent(w wanted, namer *netconfig.InterfaceNamer, netnsPath string, rec *state.Pod) (state.Attachment, error) {
	name := w.net.Name
	links, err := linksBefore(netnsPath)
	if err != nil {
		return state.Attachment{}, &netplugin.NetworkError{Network: name, Op: "interface name", Err: err}
	}
	namer.SetLinks(links)
	fixed := runtimeInterface(rec)
	claims := fixed != "" && w.net.MakesInterface()
	var ifname string
	switch {
	case w.ifname != "":
		claims = false
		ifname, err = namer.Claim(w.net, w.ifname)
	case claims:
		ifname, err = namer.Claim(w.net, fixed)
	default:
		ifname, err = namer.Name(w.net)
	}
	if err != nil {
		return state.Attachment{}, &netplugin.NetworkError{Network: name, Op: "interface name", Err: err}
	}
	args := w.args
	if rec.Runtime != nil && !claims {
		args = slices.DeleteFunc(slices.Clone(args), func(a netconfig.Arg) bool { return slices.Contains(interfaceArgs, a.Key) })
	}
	stdin, dropped, err := w.net.PluginConfigFor(args, w.rc)
	if err != nil {
		return state.Attachment{}, netplugin.WrapNetworkError(name, "plugin config", err)
	}
	if len(dropped) > 0 {
		m.log.WithFields(logrus.Fields{"network": name, "capabilities": dropped}).
			Info("capability arguments the network's config does not declare are not passed on")
	}
	return state.Attachment{Network: name, Generation: w.serving.Generation, Interface: ifname, Config: stdin,
		Image: w.serving.Image, Phase: state.AttachIntent}, nil
}

// attach runs the add of network w, whose intent is journaled as
// rec.Attachments[idx], and returns its result and the done record to
// journal, and the logger carrying the add's duration for "network
// attached" once that record is journaled. rec.Attachments[idx] becomes
// that record. The add is held until hold returns nil (see
// netplugin.Call.HeldUntil).
func (m *Manager) attach(ctx context.Context, rec *state.Pod, idx int, w wanted, hold func() error, log logrus.FieldLogger) (*current.Result, state.Attachment, logrus.FieldLogger, error) {
	name := w.net.Name
	log = log.WithField("network", name)
	att := rec.Attachments[idx]
	ifname := att.Interface
	failpoint("after-attach-intent", name)

	start := time.Now()
	call := netplugin.NewCall(target(att), netplugin.AddPath, pluginArgs(rec, ifname), att.Config).HeldUntil(hold)
	stdout, stderr, err := m.add(ctx, call, log)
	log = log.WithFields(logrus.Fields{"op": "add", "duration": time.Since(start), "interface": ifname})
	if len(stderr) > 0 {
		log = log.WithField("stderr", stderrTail(stderr))
	}
	if err != nil {
		log.WithError(err).Warn("add failed")
		return nil, att, nil, netplugin.WrapNetworkError(name, netplugin.AddPath, err)
	}
	failpoint("after-add", name)
	res, err := cniresult.Parse(stdout, w.net.CNIVersion)
	if err != nil {
		log.WithError(err).Warn("add printed no usable result")
		return nil, att, nil, &netplugin.NetworkError{Network: name, Op: netplugin.AddPath, Err: fmt.Errorf("unusable result: %w", err)}
	}
	if err := m.checkResult(rec, idx, res); err != nil {
		log.WithError(err).Warn("add's result refused")
		return nil, att, nil, foreignResultError(name, err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, att, nil, &netplugin.NetworkError{Network: name, Op: "encode result", Err: err}
	}
	raw, truncated := rawResult(stdout)
	if truncated {
		log.WithField("bytes", len(stdout)).Warnf("add's output is kept raw only up to %d bytes", MaxRawResult)
	}
	failpoint("before-done", name)
	att.Phase, att.Result, att.RawResult, att.RawResultTruncated = state.AttachDone, b, raw, truncated
	rec.Attachments[idx] = att
	return res, att, log, nil
}

// stderrLogMax caps a plugin's stderr in one log line: a plugin writes up
// to a MiB there, the log keeps its end.
const stderrLogMax = 4 << 10

// stderrTail is the last stderrLogMax bytes of a plugin's stderr.
func stderrTail(b []byte) string {
	if len(b) <= stderrLogMax {
		return string(b)
	}
	return "…" + string(b[len(b)-stderrLogMax:])
}

// MaxRawResult caps the raw add output kept beside the normalized result:
// a real result is a few KiB, and the journal holds every attachment's.
const MaxRawResult = 64 << 10

// rawResult is what is kept of add's stdout: all of it, or, past
// MaxRawResult, a prefix that ends on a whole UTF-8 sequence.
func rawResult(stdout []byte) (string, bool) {
	if len(stdout) <= MaxRawResult {
		return string(stdout), false
	}
	n := MaxRawResult
	for n > 0 && !utf8.RuneStart(stdout[n]) {
		n--
	}
	return string(stdout[:n]), true
}

// pluginArgs are add's and del's arguments: netns path, pod uuid and the
// interface. It is unknown only in an intent journaled by a kurmad before
// every attachment got a name (the wrapper finds it in its cache then).
func pluginArgs(rec *state.Pod, ifname string) []string {
	args := []string{rec.Netns, rec.ID}
	if ifname != "" {
		args = append(args, ifname)
	}
	return args
}
