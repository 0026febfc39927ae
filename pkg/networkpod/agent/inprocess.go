package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/cniwrap"
)

// In-process mode. An image built by kurma's image builder declares that its
// /opt/network/{add,del,check} are cni-wrapper of some protocol version. When
// that is the version compiled into this agent, a call of exactly one of
// those paths runs cniwrap.Run in a goroutine here instead of starting the
// wrapper binary (a Go process start costs ~16 ms of CPU on a small VM, more
// than the rest of the call). Only the wrapper's own code moves: every CNI
// plugin still runs as its own process, started by callExec below with the
// same machinery as a fork/exec call: its own process group, pipes the agent
// holds, reaping by the agent, and membership in the call's process tree,
// so a timeout or cancel kills every process of the call, background
// children included, exactly as for a fork/exec call.

// inProcessGrace bounds how long a timed-out in-process call waits for the
// wrapper's goroutine to return after its processes were killed.
const inProcessGrace = 5 * time.Second

// inProcess reports whether this agent serves the image's wrapper calls
// in-process.
func (s *Server) inProcess() bool {
	return s.CNIWrapper == cniwrap.ProtocolVersion
}

// inProcessVerb returns the wrapper verb for a request path served
// in-process.
func (s *Server) inProcessVerb(p string) (string, bool) {
	if !s.inProcess() {
		return "", false
	}
	switch p {
	case "/opt/network/add", "/opt/network/del", "/opt/network/check":
		return path.Base(p), true
	}
	return "", false
}

// runInProcess serves one call with cniwrap.Run.
func (s *Server) runInProcess(ctx context.Context, req *Request, verb string, max int, start time.Time) *Response {
	resp := &Response{InProcess: true}
	tree := newCallTree()
	s.mu.Lock()
	s.calls[tree] = struct{}{}
	s.mu.Unlock()
	trackDone := make(chan struct{})
	go s.track(tree, trackDone)
	defer func() {
		close(trackDone)
		s.endCall(tree)
	}()

	stdout := &cappedBuffer{max: max}
	stderr := &cappedBuffer{max: max}
	callCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exec := &callExec{s: s, tree: tree, stderr: stderr, max: max}
	done := make(chan int, 1)
	go func() {
		// A bug in the wrapper code must fail this call, as a crash of
		// the wrapper binary would, not the agent and every other call.
		defer func() {
			if r := recover(); r != nil {
				fmt.Fprintf(stderr, "kurma-agent: in-process %s panicked: %v\n", verb, r)
				s.logf("in-process %s panicked: %v\n%s", verb, r, debug.Stack())
				done <- 2
			}
		}()
		done <- cniwrap.Run(callCtx, verb, req.Args, bytes.NewReader(req.Stdin), stdout, stderr, cniwrap.EnvFrom(s.Env), exec)
	}()

	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	select {
	case resp.ExitCode = <-done:
	case <-timer.C:
		resp.TimedOut = true
	case <-ctx.Done():
		resp.TimedOut = true
	}
	if resp.TimedOut {
		cancel()
		s.killCall(tree)
		select {
		case <-done:
		case <-time.After(inProcessGrace):
			// Its processes are dead and it can start no more (the tree
			// is dead); only Go code of ours is left running.
			s.logf("in-process %s: the wrapper did not return %s after its processes were killed", req.Path, inProcessGrace)
		}
		resp.ExitCode = 0
	}
	resp.Stdout, resp.StdoutTruncated = stdout.snapshot()
	resp.Stderr, resp.StderrTruncated = stderr.snapshot()
	resp.Duration = time.Since(start)
	return resp
}

// callExec runs one in-process call's CNI plugins for libcni.
type callExec struct {
	s      *Server
	tree   *callTree
	stderr io.Writer // the call's stderr: plugin stderr is streamed there
	max    int
	version.PluginDecoder
}

var _ invoke.Exec = (*callExec)(nil)

// errCallKilled is returned for a plugin start asked for after the call was
// killed.
var errCallKilled = errors.New("the call was killed")

// ExecPlugin runs pluginPath like cniwrap.PluginExec does, but as a process
// of the call: see the comment at the top of this file.
func (e *callExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	tail := cniwrap.NewTailBuffer(cniwrap.StderrTail)
	var (
		out []byte
		ws  unix.WaitStatus
		err error
	)
	for range 5 {
		out, ws, err = e.run(ctx, pluginPath, stdinData, environ, tail)
		// Same retry as libcni: the binary may be in the middle of being
		// replaced.
		if !errors.Is(err, syscall.ETXTBSY) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return nil, cniwrap.Interrupted(pluginPath, ctx.Err())
	}
	if err != nil {
		return nil, cniwrap.PluginFailure(err, false, nil, "")
	}
	if ws.Signaled() {
		return nil, cniwrap.PluginFailure(fmt.Errorf("signal: %v", ws.Signal()), true, out, tail.String())
	}
	if ws.ExitStatus() != 0 {
		return nil, cniwrap.PluginFailure(fmt.Errorf("exit status %d", ws.ExitStatus()), true, out, tail.String())
	}
	return out, nil
}

// FindInPath finds plugin in paths.
func (e *callExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// run starts one plugin process and waits until it exited and every holder
// closed its stdout and stderr, or until ctx ends (then the whole call is
// killed). err is only a failure to start it.
func (e *callExec) run(ctx context.Context, pluginPath string, stdinData []byte, environ []string, tail io.Writer) ([]byte, unix.WaitStatus, error) {
	var ws unix.WaitStatus
	var fds [3][2]*os.File // stdin, stdout, stderr: read, write
	for i := range fds {
		r, w, err := os.Pipe()
		if err != nil {
			for j := range i {
				fds[j][0].Close()
				fds[j][1].Close()
			}
			return nil, ws, err
		}
		fds[i] = [2]*os.File{r, w}
	}
	stdinR, stdinW := fds[0][0], fds[0][1]
	stdoutR, stdoutW := fds[1][0], fds[1][1]
	stderrR, stderrW := fds[2][0], fds[2][1]

	w := make(chan unix.WaitStatus, 1)
	s := e.s
	s.mu.Lock()
	var pid int
	err := errCallKilled
	if !e.tree.dead && ctx.Err() == nil {
		pid, err = syscall.ForkExec(pluginPath, []string{pluginPath}, &syscall.ProcAttr{
			Dir:   "/",
			Env:   environ,
			Files: []uintptr{stdinR.Fd(), stdoutW.Fd(), stderrW.Fd()},
			Sys:   &syscall.SysProcAttr{Setpgid: true},
		})
	}
	if err == nil {
		s.waiters[pid] = w
		e.tree.addRoot(pid)
		s.roots[pid] = e.tree
		for k := range pipeInodes(stdoutR, stderrR) {
			e.tree.pipes[k] = true
		}
		// Kept open until the call ends: see callTree.pipes.
		e.tree.files = append(e.tree.files, stdoutR, stderrR)
	}
	s.mu.Unlock()
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdinW.Close()
		stdoutR.Close()
		stderrR.Close()
		return nil, ws, err
	}

	go func() {
		_, _ = stdinW.Write(stdinData)
		stdinW.Close()
	}()
	var out []byte
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); out, _ = readCapped(stdoutR, e.max) }()
	go func() { defer wg.Done(); _, _ = io.Copy(io.MultiWriter(e.stderr, tail), stderrR) }()
	outDone := make(chan struct{})
	go func() { wg.Wait(); close(outDone) }()

	exited, closed := false, false
	for !exited || !closed {
		select {
		case ws = <-w:
			exited = true
		case <-outDone:
			closed = true
		case <-ctx.Done():
			s.killCall(e.tree)
			if !exited {
				ws = <-w
			}
			<-outDone // every writer is dead now
			exited, closed = true, true
		}
	}
	return out, ws, nil
}

// cappedBuffer is a goroutine-safe buffer keeping the first max bytes.
type cappedBuffer struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - len(b.buf)
	if len(p) > room {
		b.buf = append(b.buf, p[:max(room, 0)]...)
		b.truncated = true
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *cappedBuffer) snapshot() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...), b.truncated
}
