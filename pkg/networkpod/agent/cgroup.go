package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every call runs in a cgroup of its own, made under the plugin container's
// cgroup, so that every process it starts is found and killed however it
// forks (double fork, setsid, closed fds: membership is inherited and only a
// cgroup write can change it), and only that call's processes. The
// container has a cgroup namespace of its own, rooted at its cgroup, and no
// cgroup filesystem: the agent mounts one for itself (OpenCallGroups), in a
// mount namespace only one of its threads ever enters, and keeps just the
// descriptor of its root, which is the container's cgroup. No descriptor of
// the host's cgroup tree is ever in the container, and the agent's own are
// out of the plugins' reach (Harden).
//
// Two kinds, chosen by kurmad:
//
//   - CgroupV2 (a cgroup v2 hierarchy holds the container, including the
//     "unified" one of a hybrid v1/v2 host): a process is cloned straight
//     into its call's cgroup (clone3 CLONE_INTO_CGROUP), so it never runs a
//     single instruction outside it, and cgroup.kill kills the whole cgroup
//     in one write, racing forks included;
//   - CgroupFreezer (v1 only hosts): the forking thread joins the call's
//     freezer cgroup just for the fork, so the child starts inside it; a
//     kill freezes the cgroup (no process can fork any more), SIGKILLs
//     every member, and thaws it.
const (
	CgroupV2      = "v2"
	CgroupFreezer = "freezer"
)

// killWait bounds the wait for a killed call's cgroup to empty (a process
// in uninterruptible sleep holds it); past it the call returns anyway.
const killWait = 5 * time.Second

// CallGroups makes the per-call cgroups under one directory. Once Premake
// ran, a few wait made (with their limits) for the next calls, and a
// call's cgroup is removed after its answer: making and removing one is
// off the call's path.
type CallGroups struct {
	kind   string
	dir    int // the container's cgroup directory (the agent's own cgroup)
	seq    atomic.Uint64
	limits []limitHierarchy // each call's limits (calllimits.go)
	// ready holds premade, empty call cgroups once the first call
	// started their making (premakeStart).
	ready       atomic.Pointer[chan *callGroup]
	premakeLog  func(format string, args ...any)
	premakeOnce sync.Once
}

// premadeCallGroups is how many call cgroups wait made: as many as calls
// usually start at once in one container.
const premadeCallGroups = 4

// Premake has call cgroups made ahead of the calls, in the background,
// from the first call on (a container that serves none, a policy
// network's, makes none), for as long as the process runs; log hears why
// it stopped when making one failed (each call then makes its own). Call
// it once, after OpenCallGroups.
func (gs *CallGroups) Premake(log func(format string, args ...any)) {
	gs.premakeLog = log
}

// premakeStart starts the premaking Premake asked for, once.
func (gs *CallGroups) premakeStart() {
	if gs.premakeLog == nil {
		return
	}
	gs.premakeOnce.Do(func() {
		ready := make(chan *callGroup, premadeCallGroups)
		gs.ready.Store(&ready)
		go func() {
			for {
				g, err := gs.make()
				if err != nil {
					gs.premakeLog("premaking call cgroups stopped: %v", err)
					return
				}
				ready <- g
			}
		}()
	})
}

// OpenCallGroups mounts the cgroup hierarchy of kind (cgroup2 for CgroupV2,
// the v1 freezer for CgroupFreezer) where no other thread or process sees
// it, opens its root and uses that for the calls' cgroups; with limits, the
// v1 hierarchies that carry them too (setCallLimits), whose names it
// returns when this host cannot give each call one. The agent must be in a
// cgroup namespace rooted at its own cgroup (kurmad gives the container
// one), so that the root is the container's cgroup: otherwise it refuses
// rather than hold a directory of the host's tree.
//
// With kind "", the agent picks: CgroupV2 when a cgroup v2 hierarchy holds
// the container (pure v2, or a hybrid host's unified one) and has
// cgroup.kill, else CgroupFreezer.
//
// Every hierarchy is mounted on one thread in one mount namespace of its
// own (privateMounts): a namespace costs a copy of the container's mount
// table, paid once at the agent's start rather than once per hierarchy.
func OpenCallGroups(kind string, limits CallLimits) (*CallGroups, []string, error) {
	pm := startPrivateMounts()
	defer pm.close()
	gs, err := openCallGroups(pm, kind)
	if err != nil {
		return nil, nil, err
	}
	unsupported, err := gs.setCallLimits(pm, limits)
	if err != nil {
		unix.Close(gs.dir)
		return nil, nil, err
	}
	return gs, unsupported, nil
}

func openCallGroups(pm *privateMounts, kind string) (*CallGroups, error) {
	if kind == "" {
		if gs, err := openCallGroups(pm, CgroupV2); err == nil {
			if unix.Faccessat(gs.dir, "cgroup.kill", unix.F_OK, 0) == nil {
				return gs, nil
			}
			unix.Close(gs.dir)
		}
		gs, err := openCallGroups(pm, CgroupFreezer)
		if err != nil {
			return nil, fmt.Errorf("call cgroups: no cgroup v2 hierarchy with cgroup.kill and no v1 freezer holds the container, so a call's processes could not all be killed: %w", err)
		}
		return gs, nil
	}
	fstype, data := "cgroup2", ""
	switch kind {
	case CgroupV2:
	case CgroupFreezer:
		fstype, data = "cgroup", "freezer"
	default:
		return nil, fmt.Errorf("cgroup kind %q: want %q or %q", kind, CgroupV2, CgroupFreezer)
	}
	if err := checkOwnCgroupIsRoot(kind); err != nil {
		return nil, err
	}
	fd, err := pm.mount(fstype, data)
	if err != nil {
		return nil, fmt.Errorf("open the container's cgroup: %w", err)
	}
	return NewCallGroups(kind, fd)
}

// privateMounts is a thread in a mount namespace of its own, entered on
// its first mount: only that thread ever sees the filesystems mounted
// there. close ends the thread, which is never unlocked, so it ends with
// its goroutine, taking the namespace along.
type privateMounts struct {
	reqs chan mountRequest
}

type mountRequest struct {
	fstype, data string
	done         chan mountResult
}

type mountResult struct {
	fd  int
	err error
}

func startPrivateMounts() *privateMounts {
	pm := &privateMounts{reqs: make(chan mountRequest)}
	go func() {
		runtime.LockOSThread()
		var nsErr error
		entered := false
		for r := range pm.reqs {
			if !entered && nsErr == nil {
				nsErr = enterPrivateMountNamespace()
				entered = nsErr == nil
			}
			if nsErr != nil {
				r.done <- mountResult{-1, nsErr}
				continue
			}
			fd, err := mountAndOpen(r.fstype, r.data)
			r.done <- mountResult{fd, err}
		}
	}()
	return pm
}

// mount mounts a filesystem of fstype with data on the thread, opens its
// root and detaches it: the descriptor is all that is left of it.
func (pm *privateMounts) mount(fstype, data string) (int, error) {
	done := make(chan mountResult, 1)
	pm.reqs <- mountRequest{fstype, data, done}
	r := <-done
	return r.fd, r.err
}

func (pm *privateMounts) close() { close(pm.reqs) }

// enterPrivateMountNamespace moves the calling (locked) thread into a new
// mount namespace whose mounts propagate nowhere.
func enterPrivateMountNamespace() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	return nil
}

// mountAndOpen mounts a filesystem of fstype on /dev of the calling
// thread's private mount namespace, opens its root and detaches it.
func mountAndOpen(fstype, data string) (int, error) {
	const at = "/dev" // any directory will do: nobody else sees this namespace
	if err := unix.Mount("none", at, fstype, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		return -1, fmt.Errorf("mount %s: %w", fstype, err)
	}
	fd, err := unix.Open(at, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if uerr := unix.Unmount(at, unix.MNT_DETACH); uerr != nil && err == nil {
		unix.Close(fd)
		return -1, fmt.Errorf("detach %s: %w", fstype, uerr)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", fstype, err)
	}
	return fd, nil
}

// checkOwnCgroupIsRoot checks that the process's cgroup in the hierarchy of
// kind (CgroupV2, or a v1 controller such as the freezer) is "/" as
// /proc/self/cgroup shows it: the root of its cgroup namespace.
func checkOwnCgroupIsRoot(kind string) error {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		v2 := parts[0] == "0" && parts[1] == ""
		v1 := kind != CgroupV2 && slices.Contains(strings.Split(parts[1], ","), kind)
		if (kind == CgroupV2 && v2) || v1 {
			if parts[2] != "/" {
				return fmt.Errorf("the agent's %s cgroup is %q, not the root of its cgroup namespace: the container has no cgroup namespace of its own", kind, parts[2])
			}
			return nil
		}
	}
	return fmt.Errorf("the agent is in no %s cgroup", kind)
}

// NewCallGroups uses dirfd, an open directory of the container's cgroup in
// a hierarchy of the given kind, for the calls' cgroups.
func NewCallGroups(kind string, dirfd int) (*CallGroups, error) {
	if kind != CgroupV2 && kind != CgroupFreezer {
		return nil, fmt.Errorf("cgroup kind %q: want %q or %q", kind, CgroupV2, CgroupFreezer)
	}
	unix.CloseOnExec(dirfd) // never inherited by a plugin
	return &CallGroups{kind: kind, dir: dirfd}, nil
}

// callGroup is one call's cgroup.
type callGroup struct {
	gs       *CallGroups
	name     string
	fd       int   // its directory
	limitFds []int // its directories in gs.limits' hierarchies
}

// create returns a new, empty call cgroup: a premade one, or one made now.
func (gs *CallGroups) create() (*callGroup, error) {
	defer gs.premakeStart()
	if ready := gs.ready.Load(); ready != nil {
		select {
		case g := <-*ready:
			return g, nil
		default:
		}
	}
	return gs.make()
}

// make makes a new, empty call cgroup.
func (gs *CallGroups) make() (*callGroup, error) {
	for {
		name := "call-" + strconv.FormatUint(gs.seq.Add(1), 10)
		err := unix.Mkdirat(gs.dir, name, 0o700)
		if errors.Is(err, unix.EEXIST) {
			continue // left by an agent that died; a fresh name will do
		}
		if err != nil {
			return nil, fmt.Errorf("make call cgroup: %w", err)
		}
		fd, err := unix.Openat(gs.dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = unix.Unlinkat(gs.dir, name, unix.AT_REMOVEDIR)
			return nil, fmt.Errorf("open call cgroup: %w", err)
		}
		limitFds, err := gs.createLimits(name)
		if err != nil {
			unix.Close(fd)
			_ = unix.Unlinkat(gs.dir, name, unix.AT_REMOVEDIR)
			return nil, err
		}
		return &callGroup{gs: gs, name: name, fd: fd, limitFds: limitFds}, nil
	}
}

// forkExec starts path in the call's cgroup, and in its view (a mount
// namespace, -1 for the agent's own).
func (g *callGroup) forkExec(path string, argv []string, attr *syscall.ProcAttr, view int) (int, error) {
	if g.gs.kind == CgroupV2 {
		sys := *attr.Sys
		sys.UseCgroupFD, sys.CgroupFD = true, g.fd
		a := *attr
		a.Sys = &sys
		attr = &a
		if len(g.limitFds) == 0 {
			return onViewThread(view, func() (int, error) { return syscall.ForkExec(path, argv, attr) })
		}
	}
	return g.forkExecJoined(path, argv, attr, view)
}

// forkExecJoined forks from a thread that joined the call's v1 cgroups
// for the fork (the freezer's, the limits'; v1 cgroups are per thread), on
// a goroutine of its own: if the thread cannot go back to the agent's
// cgroups it stays locked, so the runtime ends it with the goroutine rather
// than run other code in the call's cgroups.
func (g *callGroup) forkExecJoined(path string, argv []string, attr *syscall.ProcAttr, view int) (int, error) {
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if view >= 0 {
			// The thread leaves the agent's mount namespace for good:
			// it stays locked, and ends with this goroutine.
			if err := enterView(view); err != nil {
				ch <- result{0, err}
				return
			}
		}
		tid := []byte(strconv.Itoa(unix.Gettid()))
		if g.gs.kind == CgroupFreezer {
			if err := writeAt(g.fd, "tasks", tid); err != nil {
				ch <- result{0, fmt.Errorf("join call cgroup: %w", err)}
				return // locked: the thread dies with this goroutine
			}
		}
		if err := g.joinLimits(tid); err != nil {
			ch <- result{0, err}
			return
		}
		pid, err := syscall.ForkExec(path, argv, attr)
		rerr := g.leaveLimits(tid)
		if rerr == nil && g.gs.kind == CgroupFreezer {
			rerr = writeAt(g.gs.dir, "tasks", tid)
		}
		if rerr != nil || view >= 0 {
			ch <- result{pid, err}
			return // still locked: the thread dies with this goroutine
		}
		runtime.UnlockOSThread()
		ch <- result{pid, err}
	}()
	r := <-ch
	return r.pid, r.err
}

// kill kills every process in the call's cgroup and waits (at most
// killWait) until the cgroup is empty.
func (g *callGroup) kill() error {
	deadline := time.Now().Add(killWait)
	if g.gs.kind == CgroupV2 {
		if err := writeAt(g.fd, "cgroup.kill", []byte("1")); err != nil {
			return fmt.Errorf("cgroup.kill: %w", err)
		}
		return g.waitEmpty(deadline)
	}
	return g.killFreezer(deadline)
}

// killFreezer freezes the cgroup so that nothing in it can fork, SIGKILLs
// every member, and thaws it so the kills take effect.
func (g *callGroup) killFreezer(deadline time.Time) error {
	if err := writeAt(g.fd, "freezer.state", []byte("FROZEN")); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	for {
		state, err := readAt(g.fd, "freezer.state")
		if err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		if bytes.Equal(bytes.TrimSpace(state), []byte("FROZEN")) {
			break
		}
		if time.Now().After(deadline) {
			break // kill what can be killed; waitEmpty reports the rest
		}
		time.Sleep(100 * time.Microsecond)
	}
	pids, err := g.pids()
	self := os.Getpid()
	for _, pid := range pids {
		if pid != self {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	if terr := writeAt(g.fd, "freezer.state", []byte("THAWED")); terr != nil {
		return errors.Join(err, fmt.Errorf("thaw: %w", terr))
	}
	if err != nil {
		return err
	}
	return g.waitEmpty(deadline)
}

// pids lists the processes in the call's cgroup.
func (g *callGroup) pids() ([]int, error) {
	data, err := readAt(g.fd, "cgroup.procs")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range bytes.Fields(data) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// waitEmpty waits until no process is left in the cgroup.
func (g *callGroup) waitEmpty(deadline time.Time) error {
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 5*time.Millisecond) {
		empty, err := g.empty()
		if err != nil || empty {
			return err
		}
		if time.Now().After(deadline) {
			pids, _ := g.pids()
			return fmt.Errorf("processes %v of the call survived SIGKILL for %s", pids, killWait)
		}
		time.Sleep(delay)
	}
}

func (g *callGroup) empty() (bool, error) {
	if g.gs.kind == CgroupV2 {
		events, err := readAt(g.fd, "cgroup.events")
		if err != nil {
			return false, err
		}
		return bytes.Contains(events, []byte("populated 0")), nil
	}
	pids, err := g.pids()
	return len(pids) == 0, err
}

// release ends the call's cgroup: whatever the call left running is
// killed now (a call's processes never outlive it), and the cgroup, empty,
// is removed in the background (log hears what failed).
func (g *callGroup) release(log func(format string, args ...any)) error {
	empty, err := g.empty()
	if err == nil && !empty {
		err = g.kill()
	}
	go func() {
		if err := g.remove(); err != nil {
			log("end call: %v", err)
		}
	}()
	return err
}

// remove kills whatever the call left running (a call's processes never
// outlive it) and removes its cgroup.
func (g *callGroup) remove() error {
	defer unix.Close(g.fd)
	defer g.gs.removeLimits(g.name, g.limitFds)
	err := unix.Unlinkat(g.gs.dir, g.name, unix.AT_REMOVEDIR)
	if errors.Is(err, unix.EBUSY) {
		if kerr := g.kill(); kerr != nil {
			return kerr
		}
		err = unix.Unlinkat(g.gs.dir, g.name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return fmt.Errorf("remove call cgroup %s: %w", g.name, err)
	}
	return nil
}

func writeAt(dirfd int, name string, data []byte) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, data)
	return err
}

func readAt(dirfd int, name string) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}

// Kind is the kind of the call cgroups: CgroupV2 or CgroupFreezer.
func (gs *CallGroups) Kind() string { return gs.kind }
