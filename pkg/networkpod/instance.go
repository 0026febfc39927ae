package networkpod

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// instance is one incarnation of a network's container. Its init is the
// exec agent, which starts the image's main executable as its child and
// tells kurmad the main's PID and end over a pipe (readMainStatus): one
// runc process per container.
type instance struct {
	c      *libcontainer.Container
	agent  *libcontainer.Process // the container's init
	socket string
	calls  *agentConn // the agent's connection every call shares
	stderr *logWriter
	// stderrDone is closed once the main's stderr reached its end: every
	// writer of it (the main, anything it left behind) has closed it.
	stderrDone chan struct{}
	logs       *logLimiter // the rate the main's stdout and stderr share
	gate       *clone3Gate // answers the agent's seccomp notifications; nil until the agent runs
	started    time.Time
	pid        int // the main process's host PID, once it runs
	// status is kurmad's end of the pipe on which the agent tells the
	// main's PID, its own readiness and the main's end; mainStarted is
	// closed once it told the first (or could not start it, or died),
	// mainNsPid then holds that PID in the container's PID namespace (0
	// if none); agentReady is closed once it told that it serves while
	// the main runs (never after the main's end: see kurma-agent's
	// startMain).
	status      *os.File
	mainStarted chan struct{}
	mainNsPid   int
	agentReady  chan struct{}
	// mntns is the container's mount namespace, of which every call's
	// view is a copy (callview.go); nil until the agent runs.
	mntns *os.File
	// holdsState says the instance holds its network's state dir mount
	// (statedir.go): teardown releases it.
	holdsState bool

	// agentDone is closed when the agent, the init, has been reaped (or
	// was never started), agentErr then holds what Wait returned;
	// mainDone is closed when the agent told the main's end (or that it
	// could not start it), mainErr then holds its exit status as an error
	// (mainExit; nil for code 0). An agent that dies without telling
	// takes the main along (the PID namespace's init), and mainDone stays
	// open.
	mainDone, agentDone chan struct{}
	mainEndAt           time.Time // when mainDone was closed
	mainErr, agentErr   error
}

// startInstance creates the network's container from scratch, stage by
// stage: its dirs and overlay, the libcontainer container, the exec agent
// as its init, which starts the main executable (config on stdin); it
// returns once the agent said it is ready while the main runs (waitReady).
// On failure everything made is removed.
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
		if err := h.opts.Kubernetes.check(n.spec.Network); err != nil {
			return nil, fmt.Errorf("kubernetes_credentials: %w", err)
		}
	}
	c, err := h.createContainer(n.spec, rootfs, caps)
	if err != nil {
		return nil, err
	}
	logs := newLogLimiter()
	inst = &instance{
		holdsState:  true,
		c:           c,
		socket:      h.agentSocket(n.key),
		calls:       newAgentConn(h.agentSocket(n.key)),
		logs:        logs,
		stderr:      newLogWriter(n.log.WithField("stream", "stderr"), stderrKeep, logs),
		stderrDone:  make(chan struct{}),
		started:     time.Now(),
		mainDone:    make(chan struct{}),
		agentDone:   make(chan struct{}),
		mainStarted: make(chan struct{}),
		agentReady:  make(chan struct{}),
	}
	if err := h.startAgent(inst, n.spec, caps, n.log); err != nil {
		return inst, err
	}
	if err := h.recordCgroups(n.key); err != nil {
		return inst, err
	}
	if err := inst.waitReady(n.stop); err != nil {
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

// createContainer creates the libcontainer container with the capabilities
// the network grants its image.
func (h *Host) createContainer(spec Spec, rootfs string, caps []string) (*libcontainer.Container, error) {
	c, err := libcontainer.Create(h.containersRoot(), containerID(spec.key()), h.containerConfig(spec, rootfs, caps))
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	return c, nil
}

// startAgent binds the agent's socket on the host and starts the agent as
// the container's init with it (fd 3) and one end of a socket pair (fd 4)
// over which the agent hands kurmad its seccomp listener, which kurmad then
// answers (the agent's clone3 passes, every plugin's fails: see
// clone3Gate); kurmad first sends it there the kind of cgroup to make its
// calls' in, once the container's cgroups exist. The agent opens the
// container's cgroup itself, under which it makes one cgroup per call.
// Nothing in the container can reach the socket file or replace the
// listener: it is not mounted there. caps is the container's capability
// set; the agent gets a few more for itself (agentCapabilities), which it
// drops from the sets its children get before it starts any
// (agent.Harden).
//
// The agent starts the image's main executable (through `kurma-agent
// exec`, which installs its seccomp filter) as its child, with the plugin
// config on stdin, the container's capabilities, env and the image's
// working dir. The init's stdin, stdout and stderr are the main's; the
// agent's own messages come on fd 5 and the main's PID and end on fd 6.
func (h *Host) startAgent(inst *instance, spec Spec, caps []string, log logrus.FieldLogger) error {
	fail := func(err error) error {
		close(inst.agentDone)
		close(inst.mainStarted)
		return err
	}
	lis, err := listenUnix(inst.socket)
	if err != nil {
		return fail(fmt.Errorf("exec agent socket: %w", err))
	}
	defer lis.Close() // the agent holds its own copy
	ours, theirs, err := socketPair()
	if err != nil {
		return fail(fmt.Errorf("exec agent: %w", err))
	}
	defer theirs.Close()
	logR, logW, err := os.Pipe()
	if err != nil {
		ours.Close()
		return fail(fmt.Errorf("exec agent: %w", err))
	}
	defer logW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		ours.Close()
		logR.Close()
		return fail(fmt.Errorf("exec agent: %w", err))
	}
	defer statusW.Close()
	// The main's stderr is a pipe of kurmad's own (not a writer that
	// libcontainer copies from until the agent is reaped), so that its
	// end is seen when the main's is: the reason of a main that failed
	// carries its last words (mainReason).
	errR, errW, err := os.Pipe()
	if err != nil {
		ours.Close()
		logR.Close()
		statusR.Close()
		return fail(fmt.Errorf("exec agent: %w", err))
	}
	defer errW.Close()
	go func() { _, _ = io.Copy(inst.stderr, errR); errR.Close(); close(inst.stderrDone) }()
	// The kind of call cgroup follows fd 4 once the container runs (its
	// cgroups exist only then: pickCallCgroupKind).
	args := []string{agentBin, "serve", "-cgroup-from-fd"}
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
	// A limit of its own: a main flooding its output must not crowd the
	// agent's own messages (a call it could not kill) out of the log.
	agentLog := newLogWriter(log.WithField("stream", "agent"), 0, newLogLimiter())
	go func() { _, _ = io.Copy(agentLog, logR); logR.Close() }()
	inst.agent = &libcontainer.Process{
		Args: args, Env: h.containerEnv(spec), Cwd: "/",
		Stdin:      strings.NewReader(string(spec.Config)),
		Stdout:     newLogWriter(log.WithField("stream", "stdout"), 0, inst.logs),
		Stderr:     errW,
		ExtraFiles: []*os.File{lis, theirs, logW, statusW},
		Capabilities: &configs.Capabilities{
			Bounding: agentCaps, Effective: agentCaps, Permitted: agentCaps, Inheritable: agentCaps, Ambient: agentCaps,
		},
		Init: true,
	}
	if err := inst.c.Run(inst.agent); err != nil {
		ours.Close()
		statusR.Close()
		reapLeakedRuncChildren()
		return fail(fmt.Errorf("start main %s: %w", app.Exec[0], err))
	}
	inst.status = statusR
	go inst.readMainStatus()
	// The gate starts before the agent can be reaped: until then its PID
	// is the agent's.
	reap := func() { go func() { _, inst.agentErr = inst.agent.Wait(); close(inst.agentDone) }() }
	// The agent starts the main once kurmad said its container is
	// guarded (its net sysfs mounts watched: uevent.go), a line of its
	// own before the kind.
	pid, err := inst.agent.Pid()
	if err != nil {
		err = fmt.Errorf("exec agent: %w", err)
	}
	if err == nil {
		err = h.uevents.mark(fmt.Sprintf("/proc/%d/root", pid))
	}
	if err == nil {
		if _, err = ours.Write([]byte("guarded\n")); err != nil {
			err = fmt.Errorf("exec agent: %w", err)
		}
	}
	if err == nil && afterAgentStart != nil {
		afterAgentStart(inst)
	}
	var kind string
	if err == nil {
		kind, err = h.pickCallCgroupKind(inst.c)
	}
	if err == nil {
		if _, err = ours.Write([]byte(kind + "\n")); err != nil {
			err = fmt.Errorf("exec agent: %w", err)
		}
	}
	if err != nil {
		ours.Close() // the agent ends at its end: the container is failed
		reap()
		return err
	}
	inst.gate = startClone3Gate(ours, pid, log)
	reap()
	if inst.mntns, err = openMountNamespace(pid); err != nil {
		return fmt.Errorf("exec agent: %w", err)
	}
	return nil
}

// afterAgentStart, when set, runs once the agent may start the main and
// before kurmad tells it its call cgroup kind, so before it can serve or
// reap the main (a test's seam: nil in kurmad).
var afterAgentStart func(inst *instance)

// readMainStatus reads what the agent tells of the main (see kurma-agent's
// doc) until the agent is gone: its PID, then that the agent is ready,
// then the main's end; or why it could not start.
func (inst *instance) readMainStatus() {
	started, ready := false, false
	markStarted := func() {
		if !started {
			started = true
			close(inst.mainStarted)
		}
	}
	defer markStarted()
	sc := bufio.NewScanner(inst.status)
	for sc.Scan() {
		word, arg, _ := strings.Cut(sc.Text(), " ")
		switch word {
		case "main":
			inst.mainNsPid, _ = strconv.Atoi(arg)
			markStarted()
		case "ready":
			if !ready {
				ready = true
				close(inst.agentReady)
			}
		case "exit":
			ws, err := strconv.ParseUint(arg, 10, 32)
			if err != nil {
				continue
			}
			if e := (mainExit{unix.WaitStatus(ws)}); !e.success() {
				inst.mainErr = e
			}
			markStarted()
			inst.mainEndAt = time.Now()
			close(inst.mainDone)
			return
		case "fail":
			inst.mainErr = errors.New(arg)
			markStarted()
			inst.mainEndAt = time.Now()
			close(inst.mainDone)
			return
		}
	}
}

// stderrGrace bounds how long a main's reason waits, from its end, for
// the rest of its stderr: what it left running may hold the pipe open.
const stderrGrace = 500 * time.Millisecond

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
	<-inst.mainStarted
	agentPid, err := inst.agent.Pid()
	if err != nil || inst.mainNsPid == 0 {
		return 0
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", agentPid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", agentPid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			if nsPidOf(f) == inst.mainNsPid {
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
	return "", errNoCallCgroups
}

// errNoCallCgroups is pickCallCgroupKind's failure.
var errNoCallCgroups = errors.New("call cgroups: no cgroup v2 hierarchy with cgroup.kill and no v1 freezer holds the container, so a call's processes could not all be killed")

// waitReady returns once the agent told that it serves while the main
// runs ("ready" on the status pipe, readMainStatus), or with the reason it
// never will: the main or the agent ended, Stop, or startTimeout. The
// agent tells "ready" only while the main has not ended, on the pipe that
// then tells the main's end, so a main that ended before the agent was
// ready fails the start with its reason, never reading as running; one
// that ends just after may read as running until its end is told.
func (inst *instance) waitReady(stop <-chan struct{}) error {
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-inst.agentReady:
		if inst.ended() { // told just after: show its reason now
			return inst.endReason()
		}
		return nil
	case <-inst.mainDone:
		return errors.New(inst.mainReason())
	case <-inst.agentDone:
		return inst.agentReason()
	case <-stop:
		return errors.New("stopped while starting")
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
// it just before, else the agent's own.
func (inst *instance) agentReason() error {
	select {
	case <-inst.mainDone:
		return errors.New(inst.mainReason())
	case <-time.After(200 * time.Millisecond):
	}
	return fmt.Errorf("exec agent %s", exitText(inst.agentErr))
}

// mainReason is why the main ended, once mainDone: its exit and its last
// stderr lines. The agent reaps the main before it tells its end, so the
// main's last words are in the pipe by then; they are read to its end (or
// for stderrGrace) first, so that the reason names what the main said.
func (inst *instance) mainReason() string {
	select {
	case <-inst.stderrDone:
	case <-time.After(time.Until(inst.mainEndAt.Add(stderrGrace))):
	}
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

// teardown kills the container, waits for its init, the agent, to be
// reaped by its Wait goroutine (the main and every call die with it), and
// removes the container and its mounts.
func (g *generation) teardown(inst *instance) {
	_ = inst.c.Signal(unix.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
wait:
	for {
		select {
		case <-inst.agentDone:
			break wait
		case <-time.After(100 * time.Millisecond):
			reapLeakedRuncChildren()
			if time.Now().After(deadline) {
				g.log.Warn("container process not reaped after SIGKILL")
				break wait
			}
		}
	}
	if inst.status != nil {
		inst.status.Close()
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
