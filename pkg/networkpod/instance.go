package networkpod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// instance is one incarnation of a network's container.
type instance struct {
	c       *libcontainer.Container
	main    *libcontainer.Process
	agent   *libcontainer.Process
	socket  string
	calls   *agentConn // the agent's connection every call shares
	stderr  *logWriter
	logs    *logLimiter // the rate the main's stdout and stderr share
	gate    *clone3Gate // answers the agent's seccomp notifications; nil until the agent runs
	started time.Time
	pid     int // the main process's host PID, once it runs
	// mntns is the container's mount namespace, of which every call's
	// view is a copy (callview.go); nil until the agent runs.
	mntns *os.File
	// holdsState says the instance holds its network's state dir mount
	// (statedir.go): teardown releases it.
	holdsState bool

	// mainDone and agentDone are closed when that process has been
	// reaped (or was never started); mainErr and agentErr then hold
	// what Wait returned.
	mainDone, agentDone chan struct{}
	mainErr, agentErr   error
}

// startInstance creates the network's container from scratch, stage by
// stage: its dirs and overlay, the libcontainer container, the main
// executable (config on stdin), the exec agent; it returns once the agent
// answers on its socket. On failure everything made is removed.
func (h *Host) startInstance(n *generation) (inst *instance, err error) {
	// Anything of an earlier incarnation (normally already gone).
	if err := h.destroyContainer(n.key, nil); err != nil {
		return nil, err
	}
	if err := h.checkCgroupFree(n.key); err != nil {
		return nil, err
	}
	if err := h.acquireStateDir(n.spec.Network, effectiveLimits(n.spec.Limits)); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if inst != nil {
				n.teardown(inst)
			} else {
				_ = h.destroyContainer(n.key, nil)
				_ = h.releaseStateDir(n.spec.Network)
			}
		}
	}()
	rootfs, err := h.prepareInstance(n.spec)
	if err != nil {
		return nil, err
	}
	caps, err := h.grantedCapabilities(n.spec)
	if err != nil {
		return nil, err
	}
	if n.spec.KubernetesCredentials {
		if err := h.opts.Kubernetes.check(); err != nil {
			return nil, fmt.Errorf("kubernetes_credentials: %w", err)
		}
	}
	c, err := h.createContainer(n.spec, rootfs, caps)
	if err != nil {
		return nil, err
	}
	logs := newLogLimiter()
	inst = &instance{
		holdsState: true,
		c:          c,
		socket:     h.agentSocket(n.key),
		calls:      newAgentConn(h.agentSocket(n.key)),
		logs:       logs,
		stderr:     newLogWriter(n.log.WithField("stream", "stderr"), stderrKeep, logs),
		started:    time.Now(),
		mainDone:   make(chan struct{}),
		agentDone:  make(chan struct{}),
	}
	if err := inst.startMain(n.spec, h.containerEnv(n.spec), n.log); err != nil {
		return inst, err
	}
	if err := h.startAgent(inst, n.spec, caps, n.log); err != nil {
		return inst, err
	}
	if err := h.recordCgroups(n.key); err != nil {
		return inst, err
	}
	return inst, inst.waitReady(n.stop)
}

// prepareInstance makes the network's host dirs and mounts the overlay
// its container runs on; it returns the overlay's merged dir.
func (h *Host) prepareInstance(spec Spec) (string, error) {
	if len(spec.Image.App.Exec) == 0 {
		return "", errors.New("image has no main executable (app exec / entrypoint)")
	}
	for _, d := range []string{h.agentHostDir(spec.key()), h.pluginStateHostDir(spec.Network)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(h.opts.AgentPath); err != nil {
		return "", fmt.Errorf("exec agent: %w", err)
	}
	return h.mountOverlay(spec.key(), spec.Image.Rootfs, effectiveLimits(spec.Limits).WritableLayer)
}

// createContainer creates the libcontainer container with the capabilities
// the network grants its image.
func (h *Host) createContainer(spec Spec, rootfs string, caps []string) (*libcontainer.Container, error) {
	c, err := libcontainer.Create(h.containersRoot(), containerID(spec.key()), h.containerConfig(spec, rootfs, caps))
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	return c, nil
}

// startMain starts the container's first process: `kurma-agent exec`,
// which installs the seccomp filter and executes the image's main
// executable in its place, with the plugin config on stdin, in env.
func (inst *instance) startMain(spec Spec, env []string, log logrus.FieldLogger) error {
	app := spec.Image.App
	cwd := app.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	args := []string{agentBin, "exec"}
	if len(spec.AllowSyscalls) > 0 {
		args = append(args, "-allow-syscalls="+strings.Join(spec.AllowSyscalls, ","))
	}
	inst.main = &libcontainer.Process{
		Args:   append(append(args, "--"), app.Exec...),
		Env:    env,
		Cwd:    cwd,
		Stdin:  strings.NewReader(string(spec.Config)),
		Stdout: newLogWriter(log.WithField("stream", "stdout"), 0, inst.logs),
		Stderr: inst.stderr,
		Init:   true,
	}
	if err := inst.c.Run(inst.main); err != nil {
		close(inst.mainDone) // nothing to wait for
		close(inst.agentDone)
		return fmt.Errorf("start main %s: %w", app.Exec[0], err)
	}
	go func() { _, inst.mainErr = inst.main.Wait(); close(inst.mainDone) }()
	return nil
}

// startAgent binds the agent's socket on the host and starts the agent
// with it (fd 3) and one end of a socket pair (fd 4) over which the agent
// hands kurmad its seccomp listener, which kurmad then answers (the agent's
// clone3 passes, every plugin's fails: see clone3Gate). The agent opens
// the container's cgroup itself, under which it makes one cgroup per call.
// Nothing in the container can reach the socket file or replace the
// listener: it is not mounted there. caps is the container's capability
// set; the agent gets a few more for itself (agentCapabilities).
//
// A main that fails at once takes its PID namespace, the agent with it,
// down: its reason is the one to show. While the main is not known to
// have ended, a start that failed in runc is tried again (agentStartTries
// in all): runc's setns stage has been seen to fail about once in 50
// starts of a main that had reported ready (nsexec could not open the
// init's /proc/<pid>/ns files), and one such failure must not cost the
// network a restart with backoff. A failure before runc (socket, cgroup
// kind) is not retried.
func (h *Host) startAgent(inst *instance, spec Spec, caps []string, log logrus.FieldLogger) error {
	for try := 1; ; try++ {
		started, err := h.startAgentOnce(inst, spec, caps, log)
		if err == nil {
			return nil
		}
		// agentDone is closed here only for an agent that never started;
		// a started one's reaper closes it.
		done := func() {
			if !started {
				close(inst.agentDone)
			}
		}
		select {
		case <-inst.mainDone:
			done()
			return errors.New(inst.mainReason())
		case <-time.After(200 * time.Millisecond):
		}
		var runcErr *agentRunError
		if started || try == agentStartTries || !errors.As(err, &runcErr) {
			done()
			return err
		}
		pid, _ := inst.main.Pid()
		log.WithError(err).WithFields(logrus.Fields{"try": try, "mainPid": pid, "mainAlive": processExists(pid)}).
			Warn("exec agent did not start while the main runs; trying again")
	}
}

// agentStartTries is how many times startAgent runs the agent.
const agentStartTries = 3

// failAgentRuns, when positive, is how many of the next agent starts
// fail as runc's would (errInjected): the retry's test sets it.
var failAgentRuns atomic.Int32

// afterAgentStart, when set, runs once an agent process has started; an
// error it returns fails that start as a failure after runc's would (a
// test's seam: nil in kurmad).
var afterAgentStart func(inst *instance) error

var errInjected = errors.New("injected failure (test)")

// agentRunError is a failure of libcontainer to start the agent process.
type agentRunError struct{ err error }

func (e *agentRunError) Error() string { return "start exec agent: " + e.err.Error() }
func (e *agentRunError) Unwrap() error { return e.err }

// startAgentOnce is one try of startAgent. started says whether an agent
// process was started: then its reaper closes inst.agentDone, whatever
// the error, and the start is not tried again (a main that ended in the
// meantime takes the agent down with its PID namespace).
func (h *Host) startAgentOnce(inst *instance, spec Spec, caps []string, log logrus.FieldLogger) (started bool, err error) {
	if failAgentRuns.Add(-1) >= 0 {
		return false, &agentRunError{errInjected}
	}
	lis, err := listenUnix(inst.socket)
	if err != nil {
		return false, fmt.Errorf("exec agent socket: %w", err)
	}
	defer lis.Close() // the agent holds its own copy
	kind, err := h.pickCallCgroupKind(inst.c)
	if err != nil {
		return false, err
	}
	ours, theirs, err := socketPair()
	if err != nil {
		return false, fmt.Errorf("exec agent: %w", err)
	}
	defer theirs.Close()
	inst.agent = h.agentProcess(spec, caps, kind, lis, theirs, log)
	if err := inst.c.Run(inst.agent); err != nil {
		ours.Close()
		reapLeakedRuncChildren()
		return false, &agentRunError{err}
	}
	// The gate starts before the agent can be reaped: until then its PID
	// is the agent's.
	pid, err := inst.agent.Pid()
	if err == nil {
		inst.gate = startClone3Gate(ours, pid, log)
		inst.mntns, err = openMountNamespace(pid)
	} else {
		ours.Close()
	}
	go func() { _, inst.agentErr = inst.agent.Wait(); close(inst.agentDone) }()
	if err == nil && afterAgentStart != nil {
		err = afterAgentStart(inst)
	}
	if err != nil {
		return true, fmt.Errorf("exec agent: %w", err)
	}
	return true, nil
}

// agentProcess is the agent's process: `kurma-agent serve` with the
// listening socket (fd 3) and kurmad's end of the listener hand-over
// (fd 4), the call cgroup kind and limits, and its capabilities.
func (h *Host) agentProcess(spec Spec, caps []string, kind string, lis, theirs *os.File, log logrus.FieldLogger) *libcontainer.Process {
	args := []string{agentBin, "serve", "-cgroup", kind}
	if v := cniWrapperVersion(spec.Image); v != "" {
		// The agent runs the wrapper in-process only for a version it was
		// built with; for another it logs why and forks as usual.
		args = append(args, "-cni-wrapper="+v)
		log.WithField("cniWrapper", v).WithField("inProcess", v == netplugin.WrapperVersion).Debug("image declares kurma's cni-wrapper")
	}
	if len(spec.AllowSyscalls) > 0 {
		args = append(args, "-allow-syscalls="+strings.Join(spec.AllowSyscalls, ","))
	}
	agentCaps, agentOwn := h.agentCapabilities(caps)
	if !slices.Contains(agentCaps, "CAP_SYS_PTRACE") {
		log.Warn("kurmad lacks CAP_SYS_PTRACE: the exec agent's capabilities are its plugins', so until it makes itself undumpable a plugin could trace it")
	}
	if len(agentOwn) > 0 {
		args = append(args, "-own-caps="+strings.Join(agentOwn, ","))
	}
	args = append(args, callLimitArgs(effectiveLimits(spec.Limits))...)
	// A limit of its own: a main flooding its output must not crowd the
	// agent's own messages (a call it could not kill) out of the log.
	agentLog := newLogWriter(log.WithField("stream", "agent"), 0, newLogLimiter())
	return &libcontainer.Process{
		Args: args, Env: h.containerEnv(spec), Cwd: "/",
		Stdout: agentLog, Stderr: agentLog,
		ExtraFiles: []*os.File{lis, theirs},
		Capabilities: &configs.Capabilities{
			Bounding: agentCaps, Effective: agentCaps, Permitted: agentCaps, Inheritable: agentCaps, Ambient: agentCaps,
		},
	}
}

// listenUnix binds and listens on a fresh unix socket at path.
func listenUnix(path string) (*os.File, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Listen(fd, 256); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// pickCallCgroupKind says which kind of cgroup the container's agent makes
// its calls' cgroups in: a cgroup v2 one with cgroup.kill when a v2
// hierarchy holds the container (pure v2, or a hybrid host's unified
// hierarchy), else the v1 freezer's.
func (h *Host) pickCallCgroupKind(c *libcontainer.Container) (string, error) {
	st, err := c.State()
	if err != nil {
		return "", fmt.Errorf("container state: %w", err)
	}
	kinds := []string{agent.CgroupV2, agent.CgroupFreezer}
	if h.callCgroupKind != "" {
		kinds = []string{h.callCgroupKind}
	}
	for _, kind := range kinds {
		path, ok := st.CgroupPaths[map[string]string{agent.CgroupV2: "", agent.CgroupFreezer: "freezer"}[kind]]
		if kind == agent.CgroupV2 && ok {
			_, err := os.Stat(filepath.Join(path, "cgroup.kill"))
			ok = err == nil
		}
		if ok {
			return kind, nil
		}
	}
	return "", errors.New("call cgroups: no cgroup v2 hierarchy with cgroup.kill and no v1 freezer holds the container, so a call's processes could not all be killed")
}

// waitReady returns once the agent answers a probe on its socket, or with
// the reason it never will: the main or the agent ended, Stop, or
// startTimeout.
func (inst *instance) waitReady(stop <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	probe := make(chan error, 1)
	go func() { probe <- probeAgent(ctx, inst.socket) }()
	select {
	case err := <-probe:
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("exec agent did not answer within %s", startTimeout)
		}
		select { // the agent (or the main, taking it along) just died?
		case <-inst.agentDone:
			return inst.agentReason()
		case <-time.After(200 * time.Millisecond):
		}
		return fmt.Errorf("exec agent: %w", err)
	case <-inst.mainDone:
		return errors.New(inst.mainReason())
	case <-inst.agentDone:
		return inst.agentReason()
	case <-stop:
		return errors.New("stopped while starting")
	}
}

// agentReason is why the agent ended: the main's end when that took the
// agent along (the PID namespace's init died), else the agent's own.
func (inst *instance) agentReason() error {
	select {
	case <-inst.mainDone:
		return errors.New(inst.mainReason())
	case <-time.After(200 * time.Millisecond):
	}
	return fmt.Errorf("exec agent %s", exitText(inst.agentErr))
}

// probeAgent connects to the agent and sends an empty request, which the
// agent answers by closing the connection: proof that it accepts calls (a
// connection alone only proves the listener exists).
func probeAgent(ctx context.Context, socket string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if err := conn.CloseWrite(); err != nil {
		return err
	}
	n, err := conn.Read(make([]byte, 1))
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("unexpected answer (%d bytes) to a probe", n)
	}
	return err
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

// stopInstance asks the main process to stop (SIGTERM), waits the grace
// period, then kills and removes everything.
func (g *generation) stopInstance(inst *instance) {
	if err := inst.c.Signal(unix.SIGTERM); err == nil {
		t := time.NewTimer(g.host.opts.StopGrace)
		select {
		case <-inst.mainDone:
		case <-t.C:
			g.log.Warn("main process ignored SIGTERM; killing it")
		}
		t.Stop()
	}
	g.teardown(inst)
}

// teardown kills the container, waits for both processes to be reaped by
// their Wait goroutines, and removes the container and its mounts.
func (g *generation) teardown(inst *instance) {
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
					g.log.Warn("container process not reaped after SIGKILL")
					break wait
				}
			}
		}
	}
	inst.calls.close()
	if inst.gate != nil {
		inst.gate.stop()
	}
	if inst.mntns != nil {
		inst.mntns.Close()
	}
	if err := g.host.destroyContainer(g.key, inst.c); err != nil {
		g.log.WithError(err).Error("removing container")
	}
	if inst.holdsState {
		inst.holdsState = false
		if err := g.host.releaseStateDir(g.spec.Network); err != nil {
			g.log.WithError(err).Error("unmounting the network's state dir")
		}
	}
}

// cniWrapperVersion is the cni-wrapper protocol version img declares its
// /opt/network/<verb> to be (ACI annotation or OCI config label,
// see images/builder), or "".
func cniWrapperVersion(img *imagefetch.Image) string {
	if img == nil {
		return ""
	}
	for _, k := range []string{netplugin.WrapperAnnotationACI, netplugin.WrapperLabelOCI} {
		if v := img.Annotations[k]; v != "" {
			return v
		}
	}
	return img.Labels[netplugin.WrapperLabelOCI]
}
