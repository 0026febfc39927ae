package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// call is one plugin call: its cgroup and the processes it started. Both
// modes use it, a fork/exec call for its one process and an in-process
// wrapper call for each CNI plugin it runs, so the kill-everything
// guarantee lives here and in callGroup only.
type call struct {
	s     *Server
	group *callGroup
	view  int // the call's mount namespace (view.go), -1 for the agent's
	// hold, until closed, keeps every process's stdin unwritten (a held
	// call, Request.Held); nil for a call that is not held.
	hold <-chan struct{}

	mu   sync.Mutex    // held while a process is started, and to kill
	dead bool          // killed: nothing more may be started
	gone chan struct{} // closed when dead is set: held stdin is never written
}

// errCallKilled is returned for a process start asked for after the call
// was killed.
var errCallKilled = errors.New("the call was killed")

// newCall makes a call with a fresh cgroup whose processes start in view
// (-1: the agent's own mount namespace), and read their stdin once hold is
// closed (nil: at once).
func (s *Server) newCall(view int, hold <-chan struct{}) (*call, error) {
	g, err := s.Cgroups.create()
	if err != nil {
		return nil, err
	}
	return &call{s: s, group: g, view: view, hold: hold, gone: make(chan struct{})}, nil
}

// spawn is what to start: path with argv and env, stdin written to it, its
// stdout and stderr copied to the writers until every holder closed them.
type spawn struct {
	path           string
	argv, env      []string
	stdin          []byte
	stdout, stderr io.Writer
}

// proc is a started process of a call.
type proc struct {
	exited  chan unix.WaitStatus // from the reaper
	outDone chan struct{}        // stdout and stderr closed by every holder
	readers [2]*os.File          // our read ends of stdout and stderr
}

// start starts sp in the call's cgroup, in its own process group, as a
// child of the agent (which reaps it).
func (c *call) start(sp spawn) (*proc, error) {
	var fds [3][2]*os.File // stdin, stdout, stderr: read, write
	for i := range fds {
		r, w, err := os.Pipe()
		if err != nil {
			for j := range i {
				fds[j][0].Close()
				fds[j][1].Close()
			}
			return nil, err
		}
		fds[i] = [2]*os.File{r, w}
	}
	p := &proc{exited: make(chan unix.WaitStatus, 1), outDone: make(chan struct{}), readers: [2]*os.File{fds[1][0], fds[2][0]}}
	err := c.fork(sp, p, []uintptr{fds[0][0].Fd(), fds[1][1].Fd(), fds[2][1].Fd()})
	for _, f := range []*os.File{fds[0][0], fds[1][1], fds[2][1]} {
		f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{fds[0][1], fds[1][0], fds[2][0]} {
			f.Close()
		}
		return nil, err
	}
	stdinW := fds[0][1]
	go func() {
		defer stdinW.Close()
		if c.hold != nil {
			select {
			case <-c.hold:
			case <-c.gone: // killed before its release: no config, ever
				return
			}
		}
		// A plugin that does not read its stdin must not block the
		// call: EPIPE is fine.
		_, _ = stdinW.Write(sp.stdin)
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	for i, w := range []io.Writer{sp.stdout, sp.stderr} {
		go func() { defer wg.Done(); _, _ = io.Copy(w, p.readers[i]) }()
	}
	go func() { wg.Wait(); close(p.outDone) }()
	return p, nil
}

// fork starts the process with files as its fds 0-2 and registers it with
// the reaper. The server lock is held across fork and registration so that
// its exit status cannot be reaped before p waits for it.
func (c *call) fork(sp spawn, p *proc, files []uintptr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errCallKilled
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	pid, err := c.group.forkExec(sp.path, sp.argv, &syscall.ProcAttr{
		Dir:   "/",
		Env:   sp.env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}, c.view)
	if err != nil {
		return err
	}
	s.waiters[pid] = p.exited
	return nil
}

// wait waits until p exited and its output was closed by every holder.
// When ctx ends first, the whole call is killed, and wait returns once p
// is reaped and its output drained (within killWait); killed is then true.
func (c *call) wait(ctx context.Context, p *proc) (ws unix.WaitStatus, killed bool) {
	// A channel is set to nil once it has delivered: a closed outDone left
	// in the select would make it spin until the exit status arrives.
	exitedCh, outDone := p.exited, p.outDone
	for exitedCh != nil || outDone != nil {
		select {
		case ws = <-exitedCh:
			exitedCh = nil
		case <-outDone:
			outDone = nil
		case <-ctx.Done():
			c.kill()
			return c.drain(p, ws, exitedCh == nil), true
		}
	}
	p.close()
	return ws, false
}

// drain collects a killed process's status and output, giving up on a
// holder of its output that survived (outside the call's cgroup) after
// killWait.
func (c *call) drain(p *proc, ws unix.WaitStatus, exited bool) unix.WaitStatus {
	giveUp := make(chan struct{})
	t := time.AfterFunc(killWait, func() { close(giveUp) })
	defer t.Stop()
	if !exited {
		select {
		case ws = <-p.exited:
		case <-giveUp:
		}
	}
	select {
	case <-p.outDone:
	case <-giveUp:
	}
	p.close()
	return ws
}

func (p *proc) close() {
	for _, f := range p.readers {
		f.Close()
	}
}

// kill kills every process of the call; no process can be started for it
// afterwards.
func (c *call) kill() {
	c.markDead()
	if err := c.group.kill(); err != nil {
		c.s.logf("kill call: %v", err)
	}
}

// end kills whatever the call left running; its cgroup goes after.
func (c *call) end() {
	c.markDead()
	if err := c.group.release(c.s.logf); err != nil {
		c.s.logf("end call: %v", err)
	}
}

// markDead stops the call from starting processes or giving them stdin.
func (c *call) markDead() {
	c.mu.Lock()
	if !c.dead {
		c.dead = true
		close(c.gone)
	}
	c.mu.Unlock()
}

// startErr is how a failure to start sp is reported to kurmad.
func startErr(path string, err error) string {
	return fmt.Sprintf("start %s: %v", path, err)
}
