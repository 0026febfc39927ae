package agent

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The agent is its container's init (PID 1), and starts the image's main
// executable as its child (StartMain): one runc process per container
// instead of two. Its reaper (Server.reap) collects the main's exit status
// with every other child's; orphans of the main (a daemon it forked) are
// reparented to the agent and reaped likewise. Signals kurmad sends the
// container's init (SIGTERM at stop) are for the main: the agent forwards
// them (MainProcess.Signal). The main's end does not end the agent: it
// reports it (kurma-agent tells kurmad), and kurmad, for which a main that
// ended is a failed plugin, tears the whole container down, calls in flight
// included, as it did when the main was the init.

// MainProcess is the container's main executable, a child of the agent.
type MainProcess struct {
	s      *Server
	Pid    int // in the container's PID namespace
	exited chan unix.WaitStatus
}

// StartMain starts path with argv and env, in dir, with files as its fds
// 0-2, in a session of its own, as a child of the agent, in the agent's
// cgroup (the container's: never a call's) and without the agent's seccomp
// filter when started before it is installed. It must be called after
// Harden, so that the agent's own capabilities are not the main's, and
// before anything that the main must not inherit is open without
// close-on-exec. Its exit status is collected by Serve's reaper: Wait
// returns it once Serve runs.
func (s *Server) StartMain(path string, argv, env []string, dir string, files []uintptr) (*MainProcess, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return nil, err
	}
	m := &MainProcess{s: s, Pid: pid, exited: make(chan unix.WaitStatus, 1)}
	s.waiters[pid] = m.exited
	return m, nil
}

// StartMainConfined is StartMain from a thread of its own on which
// confine ran first: the main's capabilities dropped (DropThreadCaps) and
// its seccomp filter installed (InstallFilter, ThisThread) on that thread
// alone, which the main inherits when the thread forks it. No program
// runs between the agent and the main (a container's start used to run
// `kurma-agent exec`, a second Go program, to do this). The thread never
// runs anything else: its goroutine ends locked to it, which ends it (and
// the runtime makes no thread from a locked one), and StartMainConfined
// returns once it is gone, since a filter installed on every thread
// (TSYNC) or a change made on all of them fails while a thread of
// another filter lives.
func (s *Server) StartMainConfined(path string, argv, env []string, dir string, files []uintptr, confine func() error) (*MainProcess, error) {
	type started struct {
		m   *MainProcess
		err error
		tid int
	}
	ch := make(chan started, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		tid := unix.Gettid()
		if err := confine(); err != nil {
			ch <- started{err: err, tid: tid}
			return
		}
		m, err := s.StartMain(path, argv, env, dir, files)
		ch <- started{m, err, tid}
	}()
	r := <-ch
	if err := waitThreadGone(r.tid, 5*time.Second); err != nil && r.err == nil {
		// The agent cannot install its own filter beside that thread.
		r.m.Signal(unix.SIGKILL)
		return nil, err
	}
	return r.m, r.err
}

// waitThreadGone waits until thread tid of this process has ended.
func waitThreadGone(tid int, limit time.Duration) error {
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the thread that started the main (%d) did not end within %v", tid, limit)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Wait returns the main's wait status once it exited and was reaped. Call
// it once.
func (m *MainProcess) Wait() unix.WaitStatus { return <-m.exited }

// Signal sends sig to the main unless it was already reaped (its PID may
// then be another process's).
func (m *MainProcess) Signal(sig unix.Signal) {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if _, ok := m.s.waiters[m.Pid]; ok {
		_ = unix.Kill(m.Pid, sig)
	}
}

// Ended reports whether the main has exited, reaped or not. Called before
// Serve's reaper runs, it is exact: nothing else reaps the main, so an
// exited main stays a zombie until the reaper collects it and Wait returns
// its status, after Ended's answer. kurma-agent tells kurmad that it is
// ready only when Ended said no, on the pipe that then carries the main's
// end (see kurma-agent's doc): a main that ended before the agent was
// ready is never reported running.
func (m *MainProcess) Ended() bool {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if _, ok := m.s.waiters[m.Pid]; !ok {
		return true // reaped
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, m.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// Linux sets si_signo to SIGCHLD for an exited child and to 0
		// when none has (WNOHANG); ECHILD: not ours any more.
		return errors.Is(err, unix.ECHILD) || err == nil && info.Signo == int32(unix.SIGCHLD)
	}
}

// initLocked makes the waiters map; s.mu is held.
func (s *Server) initLocked() {
	if s.waiters == nil {
		s.waiters = make(map[int]chan unix.WaitStatus)
	}
}
