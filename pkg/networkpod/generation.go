package networkpod

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// startTimeout bounds one attempt to bring a container up (create, main,
// agent, the agent ready).
const startTimeout = 30 * time.Second

// stderrKeep is how many of the main's last stderr lines a failure reason
// keeps.
const stderrKeep = 5

// generation is one generation of a network as the host runs it: its
// container, supervised.
type generation struct {
	host *Host
	key  string // containerKey(spec.Network, spec.Generation)
	log  logrus.FieldLogger

	// hash is specHash of spec with the capabilities hashCaps, kept:
	// adoption and each adoption record ask it, and spec never changes.
	hashMu   sync.Mutex
	hashCaps string
	hash     string

	mu        sync.Mutex
	spec      Spec
	state     string
	reason    string
	since     time.Time
	restarts  int
	nextRetry time.Time
	inst      *instance // the running container, nil unless state is running
	trespass  string    // Status.Trespass

	retry     chan struct{} // RetryNow: cut the restart backoff short
	stop      chan struct{} // closed by requestStop (Stop and Remove)
	stopOnce  sync.Once
	abandon   chan struct{} // closed by detach: kurmad lets go, the container stays
	abandonMu sync.Once
	done      chan struct{} // closed when the supervisor returned
	firstDone chan struct{} // closed after the first start attempt

	// provides caches Provides' answers, by path; guarded by mu.
	provides map[string]bool

	// execCalls counts answered Exec calls by how the agent served them
	// ([0] fork/exec, [1] in-process); tests assert the mode with it.
	execCalls [2]atomic.Int64
}

func newGeneration(h *Host, s Spec) *generation {
	return &generation{
		host: h, spec: s, key: s.key(),
		log:       h.log.WithFields(logrus.Fields{"network": s.Network, "generation": s.Generation}),
		state:     StateStarting,
		since:     time.Now(),
		retry:     make(chan struct{}, 1),
		stop:      make(chan struct{}),
		abandon:   make(chan struct{}),
		done:      make(chan struct{}),
		firstDone: make(chan struct{}),
	}
}

// requestStop closes stop once, however many callers (Stop and Remove
// may run at once).
func (g *generation) requestStop() { g.stopOnce.Do(func() { close(g.stop) }) }

// detach closes abandon once: the supervisor lets go of the container,
// which runs on (Host.Detach).
func (g *generation) detach() { g.abandonMu.Do(func() { close(g.abandon) }) }

// setState records a new state and the running container (nil unless it
// runs), and tells Options.OnState, outside the lock.
func (g *generation) setState(state, reason string, inst *instance) {
	g.mu.Lock()
	changed := g.state != state
	g.state, g.reason, g.inst = state, reason, inst
	g.since = time.Now()
	if state != StateFailed {
		g.nextRetry = time.Time{}
	}
	g.mu.Unlock()
	if cb := g.host.opts.OnState; cb != nil && changed {
		cb(g.spec.Network, g.spec.Generation, state)
	}
}

func (g *generation) status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Status{
		Network: g.spec.Network, Generation: g.spec.Generation, State: g.state, Restarts: g.restarts,
		Reason: g.reason, Since: g.since, NextRetry: g.nextRetry, Trespass: g.trespass,
	}
	if g.inst != nil {
		s.Pid = g.inst.pid
	}
	if g.spec.Image != nil {
		s.Image = g.spec.Image.ID
	}
	return s
}

// running returns the running instance (its plugin ready or not) or the
// error an Exec gets.
func (g *generation) running() (*instance, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runningLocked()
}

// runningLocked is running, with n.mu held.
func (g *generation) runningLocked() (*instance, error) {
	if (g.state == StateRunning || g.state == StateUnavailable) && g.inst != nil {
		return g.inst, nil
	}
	reason := g.reason
	if reason == "" {
		reason = g.state
	}
	return nil, &netplugin.NetworkError{Network: g.spec.Network, Err: &netplugin.UnavailableError{Reason: reason}}
}

// supervise runs the network's container until Stop: it (re)creates the
// container, and on failure marks the generation failed, tears the
// container down and retries with exponential backoff.
func (g *generation) supervise() {
	defer close(g.done)
	first := true
	firstDone := func() {
		if first {
			first = false
			close(g.firstDone)
		}
	}
	defer firstDone()
	failures := 0
	for {
		g.setState(StateStarting, "", nil)
		inst, err := g.host.startInstance(g)
		var reason string
		if err != nil {
			reason = err.Error()
			g.setState(StateFailed, reason, nil) // said before it is logged
			g.log.WithError(err).Error("generation's container failed to start")
		} else {
			pid := inst.pid
			var state, why string
			if inst.adopted {
				// It served before this kurmad: at once, in the state
				// it had; the next probe says more.
				state, why = inst.record.State, inst.record.Reason
				if state != StateUnavailable {
					state, why = StateRunning, ""
				}
				g.mu.Lock()
				g.restarts = inst.record.Restarts
				g.mu.Unlock()
			} else {
				state, why = g.readiness(context.Background(), inst)
			}
			// A main seen ending meanwhile is never reported running:
			// watch fails it at once.
			if !inst.ended() {
				g.setState(state, why, inst)
				g.host.recordAdoption(g, inst, inst.caps, state, why)
				g.log.WithField("pid", pid).WithField("state", state).WithField("containerAdopted", inst.adopted).Info("generation running")
			}
			firstDone()
			var done bool
			if reason, done = g.watch(inst); done {
				return
			}
			reason += " at " + time.Now().UTC().Format(time.RFC3339)
			// Before teardown: no call is sent to a dying container; and
			// before the log: once a failure is logged, status says so.
			g.setState(StateFailed, reason, nil)
			g.log.WithField("reason", reason).Error("generation failed")
			if time.Since(inst.started) >= g.host.opts.RestartMax {
				failures = 0 // it ran long enough: start over from the base delay
			}
			g.teardown(inst)
		}
		firstDone()
		if g.backoff(failures, reason) {
			return
		}
		failures++
		g.mu.Lock()
		g.restarts++
		g.mu.Unlock()
	}
}

// watch waits while inst runs, probing its plugin's status on the way (see
// Options.StatusPath): until Stop (inst is stopped) or abandon, done then,
// or until its main or agent ends, with the reason.
func (g *generation) watch(inst *instance) (reason string, done bool) {
	var probe <-chan time.Time
	var t *time.Timer
	if g.probes() {
		// Set anew after each probe: SetStatusInterval applies from the
		// next one.
		t = time.NewTimer(g.host.statusEvery())
		defer t.Stop()
		probe = t.C
	}
	for {
		select {
		case <-g.stop:
			g.stopInstance(inst)
			g.setState(StateStopped, "stopped", nil)
			return "", true
		case <-g.abandon:
			// kurmad lets go: the container runs on, its state written
			// down for the next kurmad (adopt.go).
			g.mu.Lock()
			state, reason := g.state, g.reason
			g.mu.Unlock()
			inst.release()
			inst.pidfd.Close()
			g.host.recordAdoption(g, inst, inst.caps, state, reason)
			return "", true
		case <-inst.mainDone:
			return inst.mainReason(), false
		case <-inst.agentDone:
			return inst.agentReason().Error(), false
		case <-inst.watchDone:
			select {
			case <-inst.mainDone:
				return inst.mainReason(), false
			case <-inst.agentDone:
				return inst.agentReason().Error(), false
			case <-time.After(200 * time.Millisecond):
			}
			return "exec agent ended its watch (another kurmad watches it?)", false
		case <-probe:
			g.updateReadiness(context.Background(), inst)
			t.Reset(g.host.statusEvery())
		}
	}
}

// backoff waits before the next start after failures failures in a row
// (or until RetryNow); it returns true when the generation was stopped (or
// abandoned) meanwhile.
func (g *generation) backoff(failures int, reason string) bool {
	delay := g.host.opts.RestartBase << min(failures, 30)
	if delay > g.host.opts.RestartMax || delay <= 0 {
		delay = g.host.opts.RestartMax
	}
	g.mu.Lock()
	g.nextRetry = time.Now().Add(delay)
	g.mu.Unlock()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-g.stop:
		_ = g.host.destroyContainer(g.key, nil)
		g.setState(StateStopped, reason, nil)
		return true
	case <-g.abandon:
		return true
	case <-g.retry:
		g.log.Info("restarting now, as asked")
		return false
	case <-t.C:
		return false
	}
}
