package networkpod

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/cniwrap"
	"github.com/kurma-project/kurma/pkg/imagefetch"
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

	// execCalls counts answered Exec calls by how the agent served them
	// ([0] fork/exec, [1] in-process); tests assert the mode with it.
	execCalls [2]atomic.Int64
}

// instance is one incarnation of a network's container.
type instance struct {
	c       *libcontainer.Container
	main    *libcontainer.Process
	agent   *libcontainer.Process
	socket  string
	stderr  *logWriter
	started time.Time

	// mainDone and agentDone are closed when that process has been
	// reaped (or was never started); mainErr and agentErr then hold
	// what Wait returned.
	mainDone, agentDone chan struct{}
	mainErr, agentErr   error
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

// running returns the running instance or the error an Exec gets.
func (n *network) running() (*instance, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == StateRunning && n.inst != nil {
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
			n.setState(StateRunning, "", pid, inst)
			n.log.WithField("pid", pid).Info("network running")
			firstDone()
			select {
			case <-n.stop:
				n.stopInstance(inst)
				n.setState(StateStopped, "stopped", 0, nil)
				return
			case <-n.abandon:
				return
			case <-inst.mainDone:
				reason = inst.mainReason()
			case <-inst.agentDone:
				// When the main dies the kernel kills the agent too: blame
				// the main if that is what happened.
				select {
				case <-inst.mainDone:
					reason = inst.mainReason()
				case <-time.After(200 * time.Millisecond):
					reason = "exec agent " + exitText(inst.agentErr)
				}
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
		delay := n.containers.opts.RestartBase << min(failures, 30)
		if delay > n.containers.opts.RestartMax || delay <= 0 {
			delay = n.containers.opts.RestartMax
		}
		failures++
		t := time.NewTimer(delay)
		select {
		case <-n.stop:
			t.Stop()
			_ = n.containers.destroyContainer(n.spec.Name, nil)
			n.setState(StateStopped, reason, 0, nil)
			return
		case <-n.abandon:
			t.Stop()
			return
		case <-t.C:
		}
		n.mu.Lock()
		n.restarts++
		n.mu.Unlock()
	}
}

func (inst *instance) mainReason() string {
	reason := "main process " + exitText(inst.mainErr)
	if tail := inst.stderr.Tail(); tail != "" {
		reason += "; stderr: " + tail
	}
	return reason
}

func exitText(err error) string {
	var ee interface{ ExitCode() int }
	if err == nil {
		return "exited with code 0"
	}
	if errors.As(err, &ee) {
		return err.Error()
	}
	return "ended: " + err.Error()
}

// startInstance creates the network's container from scratch: overlay,
// libcontainer container, main process (config on stdin), exec agent; it
// returns once the agent answers on its socket.
func (cs *Containers) startInstance(n *network) (inst *instance, err error) {
	name := n.spec.Name
	// Anything of an earlier incarnation (normally already gone).
	if err := cs.destroyContainer(name, nil); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if inst != nil && inst.c != nil {
				n.teardown(inst)
			} else {
				_ = cs.destroyContainer(name, nil)
			}
		}
	}()
	for _, d := range []string{cs.agentHostDir(name), cs.pluginStateHostDir(name)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(cs.opts.AgentPath); err != nil {
		return nil, fmt.Errorf("exec agent: %w", err)
	}
	rootfs, err := cs.mountOverlay(name, n.spec.Image.Rootfs)
	if err != nil {
		return nil, err
	}
	c, err := libcontainer.Create(cs.containersRoot(), containerID(name), cs.containerConfig(name, rootfs))
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	app := n.spec.Image.App
	if len(app.Exec) == 0 {
		_ = c.Destroy()
		return nil, errors.New("image has no main executable (app exec / entrypoint)")
	}
	env := imageEnv(app.Env)
	cwd := app.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	inst = &instance{
		c:         c,
		socket:    cs.agentSocket(name),
		stderr:    newLogWriter(n.log.WithField("stream", "stderr"), stderrKeep),
		started:   time.Now(),
		mainDone:  make(chan struct{}),
		agentDone: make(chan struct{}),
	}
	inst.main = &libcontainer.Process{
		Args:   app.Exec,
		Env:    env,
		Cwd:    cwd,
		Stdin:  strings.NewReader(string(n.spec.Config)),
		Stdout: newLogWriter(n.log.WithField("stream", "stdout"), 0),
		Stderr: inst.stderr,
		Init:   true,
	}
	if err := c.Run(inst.main); err != nil {
		close(inst.mainDone) // nothing to wait for
		close(inst.agentDone)
		return inst, fmt.Errorf("start main %s: %w", app.Exec[0], err)
	}
	go func() { _, inst.mainErr = inst.main.Wait(); close(inst.mainDone) }()

	agentLog := newLogWriter(n.log.WithField("stream", "agent"), 0)
	agentArgs := []string{agentBin}
	if v := cniWrapperVersion(n.spec.Image); v != "" {
		// The agent runs the wrapper in-process only for a version it was
		// built with; for another it logs why and forks as usual.
		agentArgs = append(agentArgs, "-cni-wrapper="+v)
		n.log.WithField("cniWrapper", v).WithField("inProcess", v == cniwrap.ProtocolVersion).Debug("image declares kurma's cni-wrapper")
	}
	inst.agent = &libcontainer.Process{
		Args:   append(agentArgs, agentDir+"/"+agentSock),
		Env:    env,
		Cwd:    "/",
		Stdout: agentLog,
		Stderr: agentLog,
	}
	if err := c.Run(inst.agent); err != nil {
		close(inst.agentDone)
		reapLeakedRuncChildren()
		select {
		case <-inst.mainDone:
			return inst, errors.New(inst.mainReason())
		case <-time.After(200 * time.Millisecond):
		}
		return inst, fmt.Errorf("start exec agent: %w", err)
	}
	go func() { _, inst.agentErr = inst.agent.Wait(); close(inst.agentDone) }()

	deadline := time.Now().Add(startTimeout)
	for {
		conn, err := net.Dial("unix", inst.socket)
		if err == nil {
			conn.Close()
			return inst, nil
		}
		select {
		case <-inst.mainDone:
			return inst, errors.New(inst.mainReason())
		case <-inst.agentDone:
			select {
			case <-inst.mainDone:
				return inst, errors.New(inst.mainReason())
			case <-time.After(200 * time.Millisecond):
			}
			return inst, fmt.Errorf("exec agent %s", exitText(inst.agentErr))
		case <-n.stop:
			return inst, errors.New("stopped while starting")
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return inst, fmt.Errorf("exec agent did not listen within %s", startTimeout)
		}
	}
}

// stopInstance asks the main process to stop (SIGTERM), waits the grace
// period, then kills and removes everything.
func (n *network) stopInstance(inst *instance) {
	if err := inst.c.Signal(unix.SIGTERM); err == nil {
		t := time.NewTimer(n.containers.opts.StopGrace)
		select {
		case <-inst.mainDone:
		case <-t.C:
			n.log.Warn("main process ignored SIGTERM; killing it")
		}
		t.Stop()
	}
	n.teardown(inst)
}

// teardown kills the container, waits for both processes to be reaped by
// their Wait goroutines, and removes the container and its mounts.
func (n *network) teardown(inst *instance) {
	_ = inst.c.Signal(unix.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for _, ch := range []chan struct{}{inst.mainDone, inst.agentDone} {
	wait:
		for {
			select {
			case <-ch:
				break wait
			case <-time.After(100 * time.Millisecond):
				reapLeakedRuncChildren()
				if time.Now().After(deadline) {
					n.log.Warn("container process not reaped after SIGKILL")
					break wait
				}
			}
		}
	}
	if err := n.containers.destroyContainer(n.spec.Name, inst.c); err != nil {
		n.log.WithError(err).Error("removing container")
	}
}

// cniWrapperVersion is the cni-wrapper protocol version img declares its
// /opt/network/{add,del,check} to be (ACI annotation or OCI config label,
// see images/builder), or "".
func cniWrapperVersion(img *imagefetch.Image) string {
	if img == nil {
		return ""
	}
	for _, k := range []string{cniwrap.AnnotationACI, cniwrap.LabelOCI} {
		if v := img.Annotations[k]; v != "" {
			return v
		}
	}
	return img.Labels[cniwrap.LabelOCI]
}
