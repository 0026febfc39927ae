package networkpod

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netconfig"
)

// startTimeout bounds one attempt to bring a container up (create, main,
// agent, agent socket answering).
const startTimeout = 30 * time.Second

// stderrKeep is how many of the main's last stderr lines a failure reason
// keeps.
const stderrKeep = 5

// network is one configured network and its supervisor.
type network struct {
	containers *Containers
	spec       Spec
	log        logrus.FieldLogger

	mu       sync.Mutex
	state    string
	reason   string
	since    time.Time
	restarts int
	pid      int
	inst     *instance // the running container, nil unless state is running

	stop      chan struct{} // closed by Stop
	abandon   chan struct{} // closed by abandon (tests: a daemon that died)
	done      chan struct{} // closed when the supervisor returned
	firstDone chan struct{} // closed after the first start attempt

	// provides caches Provides' answers, by path; guarded by mu.
	provides map[string]bool

	// execCalls counts answered Exec calls by how the agent served them
	// ([0] fork/exec, [1] in-process); tests assert the mode with it.
	execCalls [2]atomic.Int64
}

func (n *network) setState(state, reason string, pid int, inst *instance) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.state, n.reason, n.pid, n.inst = state, reason, pid, inst
	n.since = time.Now()
}

func (n *network) status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Status{
		Name: n.spec.Name, State: n.state, Restarts: n.restarts,
		Pid: n.pid, Reason: n.reason, Since: n.since,
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
	if (n.state == StateRunning || n.state == StateUnavailable) && n.inst != nil {
		return n.inst, nil
	}
	reason := n.reason
	if reason == "" {
		reason = n.state
	}
	return nil, &netconfig.NetworkError{Network: n.spec.Name, Err: &unavailableError{reason: reason}}
}

// supervise runs the network's container until Stop: it (re)creates it, and
// on failure marks the network failed, tears the container down and retries
// with exponential backoff.
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
	if n.spec.Err != nil || n.spec.Image == nil {
		reason := "no image"
		if n.spec.Err != nil {
			reason = n.spec.Err.Error()
		}
		n.setState(StateFailed, reason, 0, nil)
		n.log.WithField("reason", reason).Error("network cannot start")
		firstDone()
		select {
		case <-n.stop:
			n.setState(StateStopped, reason, 0, nil)
		case <-n.abandon:
		}
		return
	}
	failures := 0
	for {
		n.setState(StateStarting, "", 0, nil)
		inst, err := n.containers.startInstance(n)
		var reason string
		if err != nil {
			reason = err.Error()
			n.log.WithError(err).Error("network container failed to start")
		} else {
			pid, _ := inst.main.Pid()
			inst.pid = pid
			state, why := n.readiness(inst)
			n.setState(state, why, pid, inst)
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
			n.setState(StateFailed, reason, 0, nil)
			n.teardown(inst)
		}
		n.setState(StateFailed, reason, 0, nil)
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

// watch waits while inst runs, probing its plugin's status on the way (see
// Options.StatusPath): until Stop (inst is stopped) or abandon, done then,
// or until its main or agent ends, with the reason.
func (n *network) watch(inst *instance) (reason string, done bool) {
	var probe <-chan time.Time
	if n.probes() {
		t := time.NewTicker(n.containers.opts.StatusInterval)
		defer t.Stop()
		probe = t.C
	}
	for {
		select {
		case <-n.stop:
			n.stopInstance(inst)
			n.setState(StateStopped, "stopped", 0, nil)
			return "", true
		case <-n.abandon:
			return "", true
		case <-inst.mainDone:
			return inst.mainReason(), false
		case <-inst.agentDone:
			return inst.agentReason().Error(), false
		case <-probe:
			n.updateReadiness(inst)
		}
	}
}

// backoff waits before the next start after failures failures in a row;
// it returns true when the network was stopped (or abandoned) meanwhile.
func (n *network) backoff(failures int, reason string) bool {
	delay := n.containers.opts.RestartBase << min(failures, 30)
	if delay > n.containers.opts.RestartMax || delay <= 0 {
		delay = n.containers.opts.RestartMax
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-n.stop:
		_ = n.containers.destroyContainer(n.spec.Name, nil)
		n.setState(StateStopped, reason, 0, nil)
		return true
	case <-n.abandon:
		return true
	case <-t.C:
		return false
	}
}
