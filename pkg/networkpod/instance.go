package networkpod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
	"github.com/kurma-project/kurma/pkg/networkpod/initd"
)

// instance is one incarnation of a network's container. Its init is the
// exec agent, which starts the image's main executable as its child and
// tells kurmad the main's PID, its own readiness, the main's output and
// its end over kurmad's watch of it (agent's watch.go): one runc process
// per container, started by kurma-init (starter.go), and a container that
// outlives kurmad, for the next one to adopt (adopt.go).
type instance struct {
	c        *libcontainer.Container // loaded from its state: Signal, Destroy
	agentPid int                     // the agent's host PID
	pidfd    *os.File                // the agent's pidfd: its end, for a child or not
	socket   string
	calls    *agentConn // the agent's connection every call shares
	watch    *net.UnixConn
	stdout   *logWriter
	stderr   *logWriter
	agentLog *logWriter
	logs     *logLimiter // the rate the main's stdout and stderr share
	gate     *clone3Gate // answers the agent's seccomp notifications; nil until watched
	started  time.Time
	caps     []string // the container's capability set
	pid      int      // the main process's host PID, once it runs
	// adopted: a kurmad before this one started it (adopt.go); record is
	// what that kurmad left of its state.
	adopted bool
	record  *adoptionRecord
	// state is the agent's answer to the watch: the main's PID in the
	// container's PID namespace, whether the agent was ready while it
	// ran, its end; watched is closed once it came (or the watch failed,
	// watchErr then says why).
	state    *agent.State
	watched  chan struct{}
	watchErr error
	// mntns is the container's mount namespace, of which every call's
	// view is a copy (callview.go); nil until the agent runs.
	mntns *os.File
	// holdsState says the instance holds its network's state dir mount
	// (statedir.go): teardown releases it.
	holdsState bool
	// early keeps the last lines the agent wrote to its own stderr before
	// it served (a start that fails): nil for an adopted agent.
	early *logWriter

	// agentDone is closed when the agent, the init, has ended (its
	// pidfd), or was never started; mainDone when the watch told the
	// main's end (or that it could not start it), mainErr then holds its
	// exit status as an error (mainExit; nil for code 0); watchDone when
	// the watch ended. An agent that dies takes the main along (the PID
	// namespace's init), and mainDone stays open.
	mainDone, agentDone, watchDone chan struct{}
	mainEndAt                      time.Time
	mainErr                        error
	releaseOnce                    sync.Once
}

func newInstance(h *Host, key string, log logrus.FieldLogger) *instance {
	logs := newLogLimiter()
	return &instance{
		socket: h.agentSocket(key),
		calls:  newAgentConn(h.agentSocket(key)),
		logs:   logs,
		stdout: newLogWriter(log.WithField("stream", "stdout"), 0, logs),
		stderr: newLogWriter(log.WithField("stream", "stderr"), stderrKeep, logs),
		// A limit of its own: a main flooding its output must not crowd
		// the agent's own messages (a call it could not kill) out of the
		// log.
		agentLog:  newLogWriter(log.WithField("stream", "agent"), stderrKeep, newLogLimiter()),
		started:   time.Now(),
		mainDone:  make(chan struct{}),
		agentDone: make(chan struct{}),
		watchDone: make(chan struct{}),
		watched:   make(chan struct{}),
	}
}

// startInstance brings the generation's container up: it adopts the one a
// kurmad before this one left running when it can (adopt.go), else it
// creates it from scratch, stage by stage: its dirs and overlay, the
// libcontainer container and the exec agent as its init, started by
// kurma-init, which starts the main executable (config on stdin); it
// returns once the agent said it is ready while the main runs. On failure
// everything made is removed.
func (h *Host) startInstance(n *generation) (inst *instance, err error) {
	caps, err := h.grantedCapabilities(n.spec)
	if err != nil {
		return nil, err
	}
	if sv := h.claimSurvivor(n.key); sv != nil {
		inst, err := h.adopt(n, sv, caps)
		if err == nil {
			inst.caps = caps
			return inst, nil
		}
		n.log.WithError(err).Warn("not adopting the container a kurmad before this one left running: starting it anew")
		_ = sv.c.Signal(unix.SIGKILL)
	}
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
	defer h.seedVersions(n.spec, n.stop, n.abandon)()
	if n.spec.KubernetesCredentials {
		if err := h.opts.Kubernetes.check(n.spec.Network); err != nil {
			return nil, fmt.Errorf("kubernetes_credentials: %w", err)
		}
	}
	inst = newInstance(h, n.key, n.log)
	inst.holdsState, inst.caps = true, caps
	if err := h.startAgent(inst, n, rootfs, caps); err != nil {
		return inst, err
	}
	if err := h.recordCgroups(n.key); err != nil {
		return inst, err
	}
	if err := inst.waitReady(n.stop, n.abandon); err != nil {
		return inst, err
	}
	inst.pid = inst.mainHostPid()
	return inst, nil
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

// agentProcess is the exec agent as the container's init: its arguments
// (the main's among them), environment and capabilities; caps is the
// container's set. The agent gets a few more for itself
// (agentCapabilities), which it drops from the sets its children get
// before it starts any (agent.Harden).
//
// The agent starts the image's main executable (through `kurma-agent
// exec`, which installs its seccomp filter) as its child, with the plugin
// config on stdin, the container's capabilities, env and the image's
// working dir; it guards the container's net sysfs mounts (-guard-sys)
// before. Its stdout and stderr are kurmad's pipe for the messages of a
// start that fails before it serves; the rest comes over the watch.
func (h *Host) agentProcess(spec Spec, caps []string, log logrus.FieldLogger) initd.Process {
	args := []string{agentBin, "serve", "-guard-sys=" + strings.Join(writableSysPaths, ",")}
	if h.callCgroupKind != "" {
		args = append(args, "-cgroup="+h.callCgroupKind)
	}
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
	if drop := mainDropped(spec, caps); len(drop) > 0 && slices.Contains(agentOwn, "CAP_SETPCAP") {
		args = append(args, "-main-drop-caps="+strings.Join(drop, ","))
	} else if len(drop) > 0 {
		log.Warn("kurmad lacks CAP_SETPCAP: the main executable keeps the calls' capabilities, and can reach a running call's pod through /proc")
	}
	args = append(args, callLimitArgs(effectiveLimits(spec.Limits))...)
	app := spec.Image.App
	cwd := app.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	args = append(append(args, "-main-dir="+cwd, "--"), app.Exec...)
	return initd.Process{
		Args: args, Env: h.containerEnv(spec), Cwd: "/",
		Capabilities: &configs.Capabilities{
			Bounding: agentCaps, Effective: agentCaps, Permitted: agentCaps, Inheritable: agentCaps, Ambient: agentCaps,
		},
	}
}

// startAgent has kurma-init create the container and start the agent as
// its init, with the plugin config on its stdin (the main's), kurmad's
// pipe as its stdout and stderr, and the socket kurmad binds on the host
// as its fd 3, on which it serves the calls and kurmad's watch. Nothing in
// the container can reach the socket file: it is not mounted there. Then
// kurmad watches it (watch.go) and opens its mount namespace.
func (h *Host) startAgent(inst *instance, n *generation, rootfs string, caps []string) (err error) {
	spec := n.spec
	proc := h.agentProcess(spec, caps, n.log)
	cfg := h.containerConfig(spec, rootfs, caps)
	fail := func(err error) error {
		close(inst.agentDone)
		close(inst.watched)
		return err
	}
	lis, err := listenUnix(inst.socket)
	if err != nil {
		return fail(fmt.Errorf("exec agent socket: %w", err))
	}
	defer lis.Close() // the agent holds its own copy
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("exec agent: %w", err))
	}
	defer stdinR.Close()
	earlyR, earlyW, err := os.Pipe()
	if err != nil {
		stdinW.Close()
		return fail(fmt.Errorf("exec agent: %w", err))
	}
	defer earlyW.Close()
	inst.early = inst.agentLog
	go func() { _, _ = io.Copy(inst.agentLog, earlyR); earlyR.Close() }()
	// A config larger than a pipe's buffer is read by the main as it
	// starts.
	go func() { _, _ = stdinW.Write(spec.Config); stdinW.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	go func() {
		select {
		case <-n.stop:
		case <-n.abandon:
		case <-ctx.Done():
		}
		cancel()
	}()
	if beforeAgentStart != nil {
		beforeAgentStart(ctx, n)
	}
	pid, err := h.starter.run(ctx, &initd.Request{
		Root: h.containersRoot(), Container: containerID(n.key), Config: cfg, Process: proc,
	}, []*os.File{stdinR, earlyW, earlyW, lis})
	if err != nil {
		return fail(fmt.Errorf("start main %s: %w", spec.Image.App.Exec[0], err))
	}
	if inst.c, err = libcontainer.Load(h.containersRoot(), containerID(n.key)); err != nil {
		return fail(fmt.Errorf("container state: %w", err))
	}
	st, err := inst.c.State()
	if err != nil {
		return fail(fmt.Errorf("container state: %w", err))
	}
	if inst.pidfd, err = openPidfd(pid, st.InitProcessStartTime); err != nil {
		return fail(fmt.Errorf("exec agent: %w", err))
	}
	inst.agentPid = pid
	go inst.waitAgent()
	if afterAgentStart != nil {
		afterAgentStart(inst)
	}
	if err := h.watchAgent(inst, n.log); err != nil {
		return err
	}
	if inst.mntns, err = openMountNamespace(pid); err != nil {
		return fmt.Errorf("exec agent: %w", err)
	}
	return nil
}

// beforeAgentStart, when set, runs just before kurma-init is asked to
// start the agent, with the start's context (a test's seam: nil in kurmad).
var beforeAgentStart func(ctx context.Context, n *generation)

// afterAgentStart, when set, runs once kurma-init started the agent and
// before kurmad watches it (a test's seam: nil in kurmad).
var afterAgentStart func(inst *instance)

// mainExit is the main's wait status as the agent reaped it, worded as
// os.ProcessState words it (the main was once libcontainer's to reap).
type mainExit struct{ ws unix.WaitStatus }

func (e mainExit) success() bool { return e.ws.Exited() && e.ws.ExitStatus() == 0 }

// ExitCode is the exit code, -1 when a signal ended the main.
func (e mainExit) ExitCode() int {
	if !e.ws.Exited() {
		return -1
	}
	return e.ws.ExitStatus()
}

func (e mainExit) Error() string {
	var res string
	switch {
	case e.ws.Exited():
		res = "exit status " + strconv.Itoa(e.ws.ExitStatus())
	case e.ws.Signaled():
		res = "signal: " + e.ws.Signal().String()
	default:
		res = fmt.Sprintf("wait status %#x", uint32(e.ws))
	}
	if e.ws.CoreDump() {
		res += " (core dumped)"
	}
	return res
}

// mainHostPid is the main's PID on the host: the agent's child whose
// innermost PID is the one it told (0 when the main is gone already).
func (inst *instance) mainHostPid() int {
	if inst.state == nil || inst.state.MainPid == 0 {
		return 0
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", inst.agentPid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", inst.agentPid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			if nsPidOf(f) == inst.state.MainPid {
				pid, _ := strconv.Atoi(f)
				return pid
			}
		}
	}
	return 0
}

// nsPidOf is the innermost PID of the process of host PID pid (0 when
// gone).
func nsPidOf(pid string) int {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
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

// waitReady returns once the agent told that it serves while the main
// runs (its watch's state, watch.go), or with the reason it never will:
// the main or the agent ended, Stop, abandon, or startTimeout. A main that
// ended before the agent was ready fails the start with its reason, never
// reading as running; one that ends just after may read as running until
// its end is told.
func (inst *instance) waitReady(stop, abandon <-chan struct{}) error {
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-inst.watched:
		if inst.watchErr != nil {
			if inst.ended() {
				return inst.endReason()
			}
			return inst.watchErr
		}
		if !inst.state.Ready || inst.ended() {
			return inst.endReason()
		}
		return nil
	case <-inst.agentDone:
		return inst.agentReason()
	case <-stop:
		return errors.New("stopped while starting")
	case <-abandon:
		return errors.New("kurmad stopped while the container started")
	case <-t.C:
		return fmt.Errorf("exec agent did not say it was ready within %s", startTimeout)
	}
}

// ended reports whether kurmad has seen the main or the agent end.
func (inst *instance) ended() bool {
	select {
	case <-inst.mainDone:
		return true
	case <-inst.agentDone:
		return true
	default:
		return false
	}
}

// endReason is why the instance ended, once ended: the main's reason
// when the agent told its end, else the agent's.
func (inst *instance) endReason() error {
	select {
	case <-inst.mainDone:
		return errors.New(inst.mainReason())
	default:
		return inst.agentReason()
	}
}

// agentReason is why the agent ended: the main's end when the agent told
// it just before, else the agent's own last words, when it said any.
func (inst *instance) agentReason() error {
	select {
	case <-inst.mainDone:
		return errors.New(inst.mainReason())
	case <-time.After(200 * time.Millisecond):
	}
	reason := "exec agent ended"
	if inst.early != nil {
		if tail := inst.early.Tail(); tail != "" {
			reason += ": " + tail
		}
	}
	return errors.New(reason)
}

// mainReason is why the main ended, once mainDone: its exit and its last
// stderr lines. The agent tells the main's end after the last of its
// stderr (or after a grace: what it left running may hold the pipe open),
// so the reason names what the main said.
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

// stopInstance asks the main process to stop (SIGTERM to the init, which
// the agent forwards to the main), waits the grace period, then kills and
// removes everything.
func (g *generation) stopInstance(inst *instance) {
	if err := inst.c.Signal(unix.SIGTERM); err == nil {
		t := time.NewTimer(g.host.opts.StopGrace)
		select {
		case <-inst.mainDone:
		case <-inst.agentDone:
		case <-t.C:
			g.log.Warn("main process ignored SIGTERM; killing it")
		}
		t.Stop()
	}
	g.teardown(inst)
}

// teardown kills the container, waits for its init, the agent, to end
// (the main and every call die with it), and removes the container and
// its mounts.
func (g *generation) teardown(inst *instance) {
	if inst.c != nil {
		_ = inst.c.Signal(unix.SIGKILL)
	}
	if inst.pidfd != nil {
		_ = unix.PidfdSendSignal(int(inst.pidfd.Fd()), unix.SIGKILL, nil, 0)
	}
	select {
	case <-inst.agentDone:
	case <-time.After(10 * time.Second):
		g.log.Warn("container process not gone 10s after SIGKILL")
	}
	inst.release()
	if inst.pidfd != nil {
		inst.pidfd.Close()
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

// release lets go of kurmad's hold of the instance, and nothing else: its
// watch, calls, seccomp listener, mount namespace and pidfd. The container
// runs on when it does (Detach).
func (inst *instance) release() {
	inst.releaseOnce.Do(func() {
		if inst.watch != nil {
			inst.watch.Close()
		}
		inst.calls.close()
		if inst.gate != nil {
			inst.gate.stop()
		}
		if inst.mntns != nil {
			inst.mntns.Close()
		}
	})
}

// cniWrapperVersion is the cni-wrapper protocol version img declares its
// /opt/network/<verb> to be (ACI annotation or OCI config label,
// see images/builder), or "".
func cniWrapperVersion(img *gendef.Image) string {
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
