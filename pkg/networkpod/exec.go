package networkpod

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// agentGrace is how long past the limit kurmad waits for the agent's own
// timeout answer before it closes the connection (which also makes the
// agent kill the call) and reports the timeout itself.
const agentGrace = 2 * time.Second

// Exec runs c (`c.Path c.Args...`) in the container of c's generation as
// uid 0 with the image's environment and c's stdin, and returns its stdout
// and stderr (each capped at 1 MiB; truncation is noted at the end of
// stderr). A held call (netplugin.Call.HeldUntil) starts at once and gets
// its stdin once its hold passed; when the hold fails, the call is
// cancelled before any process read its stdin and the error is the hold's.
//
// The limit is Options.PluginTimeout or ctx's deadline if earlier; when it
// expires every process the call started is killed, including background
// children holding its stdout, and the error is netplugin.ErrTimeout. A
// non-zero exit is a *netplugin.ExecError (netplugin.ErrPluginFailed). A
// generation that is not running fails at once with
// netplugin.ErrUnavailable, without running anything; one whose plugin says
// it is not ready (unavailable, see Ready) still runs calls; one that was
// never started (or was removed) fails with netplugin.ErrUnknownGeneration.
// Calls run concurrently; a failed call never affects the container.
// Options.OnCall hears of every call once it returned.
func (h *Host) Exec(ctx context.Context, c netplugin.Call) (stdout, stderr []byte, err error) {
	n, err := h.lookup(c.Network, c.Generation)
	if err == nil {
		var inst *instance
		if inst, err = n.running(); err == nil {
			return h.callInstance(ctx, n, inst, c)
		}
	}
	err = netplugin.WrapNetworkError(c.Network, c.Path, err)
	h.observe(RefusedCall(c, err))
	return nil, nil, err
}

// callInstance runs c in inst, the running container of n, and tells
// Options.OnCall; its errors name the network and the path.
func (h *Host) callInstance(ctx context.Context, n *generation, inst *instance, c netplugin.Call) (stdout, stderr []byte, err error) {
	rec := newRecord(c)
	rec.Pid = inst.pid
	resp, err := h.exec(ctx, n, inst, c)
	if resp != nil {
		stdout, stderr = resp.Stdout, resp.Stderr
		rec.ExitCode, rec.Signal, rec.InProcess = resp.ExitCode, resp.Signal, resp.InProcess
	}
	rec.Duration = time.Since(rec.Start)
	err = netplugin.WrapNetworkError(n.spec.Network, c.Path, err)
	rec.Stdout, rec.Stderr, rec.Err = stdout, stderr, err
	h.observe(rec)
	return stdout, stderr, err
}

// RefusedCall is what Options.OnCall hears of c when it was refused
// before anything ran, err saying why (networks.Controller refuses calls
// to a generation waiting for its image so).
func RefusedCall(c netplugin.Call, err error) *Call {
	rec := newRecord(c)
	rec.Err = err
	return rec
}

// newRecord is what Options.OnCall hears of c, started now: the outcome
// is filled in by the caller.
func newRecord(c netplugin.Call) *Call {
	stdin, _ := c.HeldStdin() // a record: it gives no process anything
	return &Call{Network: c.Network, Generation: c.Generation, Path: c.Path, Args: c.Args, Stdin: stdin, Start: time.Now()}
}

// observe hands c to Options.OnCall.
func (h *Host) observe(c *Call) {
	if h.opts.OnCall != nil {
		h.opts.OnCall(c)
	}
}

// exec is one call through inst's agent, in a view of the pods' netns its
// arguments name, watched for trespass; its errors describe the call,
// callInstance names the network. The response, when there is one, has
// the notes on truncated output added to its stderr.
func (h *Host) exec(ctx context.Context, n *generation, inst *instance, c netplugin.Call) (*agent.Response, error) {
	limit := h.callLimit(ctx)
	if limit <= 0 {
		return nil, &netplugin.TimeoutError{Limit: 0}
	}
	start := time.Now()
	names := h.viewedNetns(c.Path, c.Args)
	view, err := h.makeCallView(inst.mntns, names)
	if err != nil {
		return nil, err
	}
	watched := h.watch.begin(podNames(names), h.netnsInodes(names), slices.Equal(names, allNetns))
	stdin, hold := c.HeldStdin() // the agent gives it once hold passed
	resp, err := inst.calls.call(ctx, &agent.Request{
		Path: c.Path, Args: c.Args, Stdin: stdin, Timeout: limit, MaxOutput: agent.DefaultMaxOutput, View: true,
	}, view, limit+agentGrace, hold)
	log := n.log.WithField("op", c.Path).WithField("duration", time.Since(start))
	if t := h.trespassed(n, watched, log); t != nil && err == nil {
		return resp, t
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Cancelled: the agent has killed the call (it answered after the
		// kill unless err says it did not answer).
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, agentError(ctx, n, err, limit, log)
	}
	return resp, answer(n, resp, limit, log)
}

// callLimit is how long a call started now may run: the plugin timeout,
// or what is left of ctx's deadline when that is sooner.
func (h *Host) callLimit(ctx context.Context) time.Duration {
	limit := time.Duration(h.pluginTimeout.Load())
	if dl, ok := ctx.Deadline(); ok {
		if until := time.Until(dl); until < limit {
			limit = until.Round(time.Millisecond)
		}
	}
	return limit
}

// agentError is the error of a call of n the agent gave no answer to
// (err is why), limit being the call's.
func agentError(ctx context.Context, n *generation, err error, limit time.Duration, log logrus.FieldLogger) error {
	var he *holdError
	if errors.As(err, &he) {
		return he.err // nothing read its stdin: the hold's error
	}
	if errors.Is(err, errAgentDeadline) || ctx.Err() != nil {
		log.Warn("plugin timed out; the exec agent did not answer in time")
		return &netplugin.TimeoutError{Limit: limit}
	}
	var de *dialError
	if errors.As(err, &de) {
		// The container is going away (or restarting): nothing ran.
		return &netplugin.NetworkError{Network: n.spec.Network, Err: &netplugin.UnavailableError{Reason: "exec agent not reachable: " + de.err.Error()}}
	}
	if errors.Is(err, netplugin.ErrPluginFailed) {
		log.WithError(err).Warn("exec agent answer refused")
		return err
	}
	log.WithError(err).Warn("exec agent call failed")
	return fmt.Errorf("exec agent (the container may have stopped): %w", err)
}

// answer counts and logs the agent's answer resp to a call of n, adds
// kurma's notes on limits and truncation to its stderr, and returns the
// call's error: nil when the plugin exited 0.
func answer(n *generation, resp *agent.Response, limit time.Duration, log logrus.FieldLogger) error {
	if resp.InProcess {
		n.execCalls[1].Add(1)
		log = log.WithField("inProcess", true)
	} else {
		n.execCalls[0].Add(1)
	}
	for _, hit := range resp.LimitsHit {
		resp.Stderr = append(resp.Stderr, limitNote(effectiveLimits(n.spec.Limits), hit)...)
		log = log.WithField("limit", hit)
	}
	if resp.StdoutTruncated {
		resp.Stderr = append(resp.Stderr, fmt.Sprintf("\n[kurma: stdout truncated at %d bytes]\n", agent.DefaultMaxOutput)...)
	}
	if resp.StderrTruncated {
		resp.Stderr = append(resp.Stderr, fmt.Sprintf("\n[kurma: stderr truncated at %d bytes]\n", agent.DefaultMaxOutput)...)
	}
	if len(resp.Stderr) > 0 {
		log = log.WithField("stderr", tail(string(resp.Stderr), stderrExcerpt))
	}
	switch {
	case resp.TimedOut:
		log.Warn("plugin timed out")
		return &netplugin.TimeoutError{Limit: limit}
	case resp.Error != "":
		log.WithField("error", resp.Error).Warn("plugin did not start")
		return fmt.Errorf("%w: %s", netplugin.ErrPluginFailed, resp.Error)
	case resp.ExitCode != 0 || resp.Signal != "":
		e := &netplugin.ExecError{
			ExitCode: resp.ExitCode, Signal: resp.Signal,
			CNIError: parseCNIError(resp.Stdout), Stderr: tail(string(resp.Stderr), stderrExcerpt),
		}
		if e.CNIError == nil {
			e.Stdout = head(string(resp.Stdout), stderrExcerpt)
		}
		log.WithField("exit", resp.ExitCode).Warn("plugin failed")
		return e
	}
	log.Debug("plugin call done")
	return nil
}

// trespassed ends the watch of a call of n and returns the first trespass
// seen while it ran (nil when none), which it logs and puts in n's status
// with the others; it logs the changes seen while no call ran.
func (h *Host) trespassed(n *generation, c *watchedCall, log logrus.FieldLogger) error {
	for _, t := range h.watch.takeOutside() {
		h.log.WithField("pod", t.Pod).WithField("change", t.Change).
			Warn("a pod's network namespace changed while none of its calls ran, nor any other: a plugin's main executable, or another program")
	}
	seen := h.watch.end(c)
	if len(seen) == 0 {
		return nil
	}
	for _, t := range seen {
		log.WithField("pod", t.Pod).WithField("change", t.Change).
			Error("another pod's network namespace changed while this call ran: the call fails")
	}
	n.mu.Lock()
	n.trespass = fmt.Sprintf("%s: %s", time.Now().UTC().Format(time.RFC3339), seen[0].Error())
	n.mu.Unlock()
	return &seen[0]
}

// podNames are the names of a view's pods, none for allNetns.
func podNames(names []string) []string {
	if slices.Equal(names, allNetns) {
		return nil
	}
	return names
}

// netnsInodes are the inodes of the netns dir's entries of those names
// (none for allNetns).
func (h *Host) netnsInodes(names []string) []uint64 {
	if slices.Equal(names, allNetns) {
		return nil
	}
	var out []uint64
	for _, name := range names {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(h.NetnsDir(), name), &st) == nil {
			out = append(out, st.Ino)
		}
	}
	return out
}

// Call is one Exec (or status probe) as Options.OnCall hears of it, once
// it returned. Its slices are the caller's: a hook that keeps them copies.
type Call struct {
	Network string
	// Generation is the generation of the network's plugin container the
	// call was for.
	Generation int
	Path       string
	Args       []string
	Stdin      []byte
	// Stdout and Stderr are what Exec returned (stderr with kurma's notes
	// on truncation); nil when nothing ran.
	Stdout, Stderr []byte
	// ExitCode is the process's exit status, -1 when a signal (Signal)
	// killed it; 0 also when nothing ran (Err says why).
	ExitCode int
	Signal   string
	Start    time.Time
	Duration time.Duration
	// Pid is the host PID of the main process of the container that
	// served the call (the PID `net ls` shows); 0 when none did.
	Pid int
	// InProcess is set when the agent ran the image's cni-wrapper code
	// itself.
	InProcess bool
	// Err is what Exec returned: nil, or an error naming the network.
	Err error
}

var errAgentDeadline = errors.New("no answer from the exec agent in time")

// dialError means the agent could not be reached: the call did not start.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// tail returns the last max bytes of s.
// head is s cut to its first max bytes (on a UTF-8 boundary), marked
// when cut.
func head(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "…"
}

func tail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return "…" + s[len(s)-max:]
}
