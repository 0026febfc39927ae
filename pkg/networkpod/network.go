package networkpod

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// startTimeout bounds one attempt to bring a container up (create, main,
// agent, agent socket answering).
const startTimeout = 30 * time.Second

// stderrKeep is how many of the main's last stderr lines a failure reason
// keeps.
const stderrKeep = 5

// network is one generation of a network and its supervisor.
type network struct {
	containers *Containers
	key        string // containerKey(spec.Name, spec.Generation)
	log        logrus.FieldLogger

	mu        sync.Mutex
	spec      Spec // Image is set once, under mu, when Provide hands it over
	state     string
	reason    string
	since     time.Time
	restarts  int
	nextRetry time.Time
	inst      *instance // the running container, nil unless state is running

	provided  chan *imagefetch.Image // Provide's image, for a spec without one
	retry     chan struct{}          // RetryNow: cut the restart backoff short
	stop      chan struct{}          // closed by Stop and Remove
	abandon   chan struct{}          // closed by abandon (tests: a daemon that died)
	done      chan struct{}          // closed when the supervisor returned
	firstDone chan struct{}          // closed after the first start attempt (or the wait for an image began)

	// provides caches Provides' answers, by path; guarded by mu.
	provides map[string]bool

	// execCalls counts answered Exec calls by how the agent served them
	// ([0] fork/exec, [1] in-process); tests assert the mode with it.
	execCalls [2]atomic.Int64
}

func newNetwork(cs *Containers, s Spec) *network {
	return &network{
		containers: cs, spec: s, key: s.key(),
		log:       cs.log.WithFields(logrus.Fields{"network": s.Name, "generation": s.Generation}),
		state:     StateStarting,
		since:     time.Now(),
		provided:  make(chan *imagefetch.Image, 1),
		retry:     make(chan struct{}, 1),
		stop:      make(chan struct{}),
		abandon:   make(chan struct{}),
		done:      make(chan struct{}),
		firstDone: make(chan struct{}),
	}
}

// setState records a new state and the running container (nil unless it
// runs), and tells Options.OnState, outside the lock.
func (n *network) setState(state, reason string, inst *instance) {
	n.mu.Lock()
	changed := n.state != state
	n.state, n.reason, n.inst = state, reason, inst
	n.since = time.Now()
	if state != StateFailed {
		n.nextRetry = time.Time{}
	}
	n.mu.Unlock()
	if cb := n.containers.opts.OnState; cb != nil && changed {
		cb(n.spec.Name, n.spec.Generation, state)
	}
}

func (n *network) status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Status{
		Name: n.spec.Name, Generation: n.spec.Generation, State: n.state, Restarts: n.restarts,
		Reason: n.reason, Since: n.since, NextRetry: n.nextRetry,
	}
	if n.inst != nil {
		s.Pid = n.inst.pid
	}
	if n.spec.Image != nil {
		s.Image = n.spec.Image.ID
	}
	return s
}

// running returns the running instance (its plugin ready or not) or the
// error an Exec gets.
func (n *network) running() (*instance, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

// runningLocked is running, with n.mu held.
func (n *network) runningLocked() (*instance, error) {
	if (n.state == StateRunning || n.state == StateUnavailable) && n.inst != nil {
		return n.inst, nil
	}
	reason := n.reason
	switch {
	case n.state == StateFetching:
		reason = "fetching its image"
	case reason == "":
		reason = n.state
	}
	return nil, &netconfig.NetworkError{Network: n.spec.Name, Err: &unavailableError{reason: reason}}
}

// image returns the spec's image, nil while the network waits for one.
func (n *network) image() *imagefetch.Image {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.spec.Image
}

// supervise runs the network's container until Stop: it waits for its
// image if it has none yet, (re)creates the container, and on failure marks
// the network failed, tears the container down and retries with
// exponential backoff.
func (n *network) supervise() {
	defer close(n.done)
	first := true
	firstDone := func() {
		if first {
			first = false
			close(n.firstDone)
		}
	}
	defer firstDone()
	if n.image() == nil && !n.waitImage(firstDone) {
		return
	}
	failures := 0
	for {
		n.setState(StateStarting, "", nil)
		inst, err := n.containers.startInstance(n)
		var reason string
		if err != nil {
			reason = err.Error()
			n.log.WithError(err).Error("network container failed to start")
			n.setState(StateFailed, reason, nil)
		} else {
			pid, _ := inst.main.Pid()
			inst.pid = pid
			state, why := n.readiness(inst)
			n.setState(state, why, inst)
			n.log.WithField("pid", pid).WithField("state", state).Info("network running")
			firstDone()
			var done bool
			if reason, done = n.watch(inst); done {
				return
			}
			reason += " at " + time.Now().UTC().Format(time.RFC3339)
			n.log.WithField("reason", reason).Error("network failed")
			if time.Since(inst.started) >= n.containers.opts.RestartMax {
				failures = 0 // it ran long enough: start over from the base delay
			}
			n.setState(StateFailed, reason, nil) // before teardown: no call is sent to a dying container
			n.teardown(inst)
		}
		firstDone()
		if n.backoff(failures, reason) {
			return
		}
		failures++
		n.mu.Lock()
		n.restarts++
		n.mu.Unlock()
	}
}

// waitImage shows the network fetching (or failed, with the spec's error)
// until Provide hands it its image; false when it was stopped (or
// abandoned) meanwhile.
func (n *network) waitImage(firstDone func()) bool {
	state, reason := StateFetching, ""
	if n.spec.Err != nil {
		state, reason = StateFailed, n.spec.Err.Error()
		n.log.WithField("reason", reason).Error("network cannot start")
	}
	n.setState(state, reason, nil)
	firstDone()
	select {
	case img := <-n.provided:
		n.mu.Lock()
		n.spec.Image, n.spec.Err = img, nil
		n.mu.Unlock()
		return true
	case <-n.stop:
		n.mu.Lock()
		reason = n.reason
		n.mu.Unlock()
		n.setState(StateStopped, reason, nil)
		return false
	case <-n.abandon:
		return false
	}
}

// watch waits while inst runs, probing its plugin's status on the way (see
// Options.StatusPath): until Stop (inst is stopped) or abandon, done then,
// or until its main or agent ends, with the reason.
func (n *network) watch(inst *instance) (reason string, done bool) {
	var probe <-chan time.Time
	var t *time.Timer
	if n.probes() {
		// Set anew after each probe: SetStatusInterval applies from the
		// next one.
		t = time.NewTimer(n.containers.statusEvery())
		defer t.Stop()
		probe = t.C
	}
	for {
		select {
		case <-n.stop:
			n.stopInstance(inst)
			n.setState(StateStopped, "stopped", nil)
			return "", true
		case <-n.abandon:
			return "", true
		case <-inst.mainDone:
			return inst.mainReason(), false
		case <-inst.agentDone:
			return inst.agentReason().Error(), false
		case <-probe:
			n.updateReadiness(inst)
			t.Reset(n.containers.statusEvery())
		}
	}
}

// backoff waits before the next start after failures failures in a row
// (or until RetryNow); it returns true when the network was stopped (or
// abandoned) meanwhile.
func (n *network) backoff(failures int, reason string) bool {
	delay := n.containers.opts.RestartBase << min(failures, 30)
	if delay > n.containers.opts.RestartMax || delay <= 0 {
		delay = n.containers.opts.RestartMax
	}
	n.mu.Lock()
	n.nextRetry = time.Now().Add(delay)
	n.mu.Unlock()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-n.stop:
		_ = n.containers.destroyContainer(n.key, nil)
		n.setState(StateStopped, reason, nil)
		return true
	case <-n.abandon:
		return true
	case <-n.retry:
		n.log.Info("restarting now, as asked")
		return false
	case <-t.C:
		return false
	}
}
