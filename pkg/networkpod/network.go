package networkpod

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/cniwrap"
	"github.com/kurma-project/kurma/pkg/imagefetch"
)

// startTimeout bounds one attempt to bring a container up (create, main,
// agent, agent socket answering).
const startTimeout = 30 * time.Second

// stderrKeep is how many of the main's last stderr lines a failure reason
// keeps.
const stderrKeep = 5

// network is one configured network and its supervisor.
type network struct {
	pod  *Pod
	spec Spec
	log  logrus.FieldLogger

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
	return nil, &unavailableError{network: n.spec.Name, reason: reason}
}

// Start starts one container per spec, concurrently, and returns once every
// network had its first start attempt (or ctx is done). A network that fails
// to start is not an error of Start: it shows as failed in Status and is
// retried with backoff. Start returns an error only for what concerns the
// whole pod (directories, the shared netns mount, a duplicate name).
// Containers left by an earlier daemon on the same RunDir are removed first.
func (p *Pod) Start(ctx context.Context, specs []Spec) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return errors.New("networkpod: Start after Stop")
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if s.Name == "" || strings.ContainsAny(s.Name, "/\x00") || s.Name == "." || s.Name == ".." {
			p.mu.Unlock()
			return fmt.Errorf("networkpod: bad network name %q", s.Name)
		}
		if _, dup := p.networks[s.Name]; dup || seen[s.Name] {
			p.mu.Unlock()
			return fmt.Errorf("networkpod: network %q started twice", s.Name)
		}
		seen[s.Name] = true
	}
	p.mu.Unlock()

	for _, d := range []string{p.opts.RunDir, p.containersRoot(), filepath.Join(p.opts.RunDir, "networks"), filepath.Join(p.opts.StateDir, "networks")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("networkpod: %w", err)
		}
	}
	if n := len(p.agentSocket(strings.Repeat("x", 15))); n > 107 {
		return fmt.Errorf("networkpod: run dir %s is too long for unix socket paths under it", p.opts.RunDir)
	}
	if err := p.ensureSharedNetnsDir(); err != nil {
		return fmt.Errorf("networkpod: netns dir: %w", err)
	}
	if err := p.cleanupStale(seen); err != nil {
		p.log.WithError(err).Warn("cleaning up containers of an earlier run")
	}

	nets := make([]*network, 0, len(specs))
	p.mu.Lock()
	for _, s := range specs {
		n := &network{
			pod: p, spec: s,
			log:       p.log.WithField("network", s.Name),
			state:     StateStarting,
			since:     time.Now(),
			stop:      make(chan struct{}),
			abandon:   make(chan struct{}),
			done:      make(chan struct{}),
			firstDone: make(chan struct{}),
		}
		p.networks[s.Name] = n
		p.order = append(p.order, s.Name)
		nets = append(nets, n)
	}
	p.mu.Unlock()
	for _, n := range nets {
		go n.supervise()
	}
	for _, n := range nets {
		select {
		case <-n.firstDone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// cleanupStale removes every container, cgroup and run dir on this RunDir
// that no running network of this Pod owns: what a daemon that died left.
func (p *Pod) cleanupStale(names map[string]bool) error {
	stale := map[string]bool{}
	for n := range names {
		stale[n] = true
	}
	if entries, err := os.ReadDir(p.containersRoot()); err == nil {
		for _, e := range entries {
			if n, ok := strings.CutPrefix(e.Name(), "kurma-net-"); ok {
				stale[n] = true
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(p.opts.RunDir, "networks")); err == nil {
		for _, e := range entries {
			stale[e.Name()] = true
		}
	}
	for _, h := range cgroupHierarchies() {
		entries, _ := os.ReadDir(filepath.Join(h, p.opts.CgroupParent))
		for _, e := range entries {
			if n, ok := strings.CutPrefix(e.Name(), "kurma-net-"); ok && e.IsDir() {
				stale[n] = true
			}
		}
	}
	p.mu.Lock()
	for n := range p.networks {
		delete(stale, n)
	}
	p.mu.Unlock()
	var errs []error
	for n := range stale {
		if _, err := os.Stat(filepath.Join(p.containersRoot(), containerID(n))); err == nil {
			p.log.WithField("network", n).Info("removing the container of an earlier run")
		}
		if err := p.destroyContainer(n, nil); err != nil {
			errs = append(errs, err)
		}
	}
	// With no network of ours running (the first Start), nothing can be
	// creating a container under the parent now.
	p.mu.Lock()
	first := len(p.networks) == 0
	p.mu.Unlock()
	if first {
		if err := p.removeCgroupParent(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
		inst, err := n.pod.startInstance(n)
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
			if time.Since(inst.started) >= n.pod.opts.RestartMax {
				failures = 0 // it ran long enough: start over from the base delay
			}
			n.setState(StateFailed, reason, 0, nil)
			n.teardown(inst)
		}
		n.setState(StateFailed, reason, 0, nil)
		firstDone()
		delay := n.pod.opts.RestartBase << min(failures, 30)
		if delay > n.pod.opts.RestartMax || delay <= 0 {
			delay = n.pod.opts.RestartMax
		}
		failures++
		t := time.NewTimer(delay)
		select {
		case <-n.stop:
			t.Stop()
			_ = n.pod.destroyContainer(n.spec.Name, nil)
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
func (p *Pod) startInstance(n *network) (inst *instance, err error) {
	name := n.spec.Name
	// Anything of an earlier incarnation (normally already gone).
	if err := p.destroyContainer(name, nil); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if inst != nil && inst.c != nil {
				n.teardown(inst)
			} else {
				_ = p.destroyContainer(name, nil)
			}
		}
	}()
	for _, d := range []string{p.agentHostDir(name), p.pluginStateHostDir(name)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(p.opts.AgentPath); err != nil {
		return nil, fmt.Errorf("exec agent: %w", err)
	}
	rootfs, err := p.mountOverlay(name, n.spec.Image.Rootfs)
	if err != nil {
		return nil, err
	}
	c, err := libcontainer.Create(p.containersRoot(), containerID(name), p.containerConfig(name, rootfs))
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
		socket:    p.agentSocket(name),
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
		t := time.NewTimer(n.pod.opts.StopGrace)
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
	if err := n.pod.destroyContainer(n.spec.Name, inst.c); err != nil {
		n.log.WithError(err).Error("removing container")
	}
}

// Stop stops every network: SIGTERM to each main process, the grace period,
// SIGKILL, and removal of containers, mounts, overlay dirs and cgroups. The
// netns dir's bind mount is removed too unless pod namespaces are still
// mounted in it. Stop is final: the Pod cannot be started again.
func (p *Pod) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	nets := make([]*network, 0, len(p.networks))
	for _, name := range p.order {
		nets = append(nets, p.networks[name])
	}
	p.mu.Unlock()
	for _, n := range nets {
		select {
		case <-n.stop:
		default:
			close(n.stop)
		}
	}
	for _, n := range nets {
		select {
		case <-n.done:
		case <-ctx.Done():
			return fmt.Errorf("networkpod: stop: %w", ctx.Err())
		}
	}
	var errs []error
	if err := p.removeCgroupParent(); err != nil {
		errs = append(errs, err)
	}
	if err := p.releaseNetnsDir(); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove(filepath.Join(p.opts.RunDir, "networks"))
	return errors.Join(errs...)
}

// abandonAll stops supervising without touching the containers, as if the
// daemon died: tests use it to leave stale state behind.
func (p *Pod) abandonAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for _, n := range p.networks {
		close(n.abandon)
	}
}

// releaseNetnsDir removes the netns dir's bind mount when no pod namespace
// is mounted in it (those belong to pods that outlive the daemon). EBUSY
// right after the containers died is their mount namespaces going away.
func (p *Pod) releaseNetnsDir() error {
	dir := p.NetnsDir()
	for i := range 40 {
		points, err := mountPointsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		for _, pt := range points {
			if pt != dir {
				p.log.WithField("dir", dir).Info("network namespaces still mounted; leaving the netns dir mounted")
				return nil
			}
		}
		err = unix.Unmount(dir, 0)
		if err == nil || errors.Is(err, unix.EINVAL) {
			continue
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("networkpod: unmount %s: %w", dir, err)
		}
		time.Sleep(time.Duration(i+1) * 2 * time.Millisecond)
	}
	return fmt.Errorf("networkpod: unmount %s: still busy", dir)
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
