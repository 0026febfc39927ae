package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/cniwrap"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// In-process mode. An image built by kurma's image builder declares that its
// /opt/network/{add,del,check,gc,status} are cni-wrapper of some protocol version. When
// that is the version compiled into this agent, a call of exactly one of
// those paths runs cniwrap.Run in a goroutine here instead of starting the
// wrapper binary (a Go process start costs ~16 ms of CPU on a small VM, more
// than the rest of the call). Only the wrapper's own code moves: every CNI
// plugin still runs as its own process, started by callExec below through
// the same spawn path as a fork/exec call (call.start): its own process
// group, reaping by the agent, and membership in the call's cgroup, so a
// timeout or cancel kills every process of the call, background children
// included, exactly as for a fork/exec call.

// inProcessGrace bounds how long a timed-out in-process call waits for the
// wrapper's goroutine to return after its processes were killed.
const inProcessGrace = 5 * time.Second

// inProcess reports whether this agent serves the image's wrapper calls
// in-process.
func (s *Server) inProcess() bool {
	return s.CNIWrapper == netplugin.WrapperVersion
}

// inProcessVerb returns the wrapper verb for a request path served
// in-process.
func (s *Server) inProcessVerb(p string) (string, bool) {
	if !s.inProcess() {
		return "", false
	}
	// Every verb of the contract (the wrapper has them all), not setup,
	// the main executable, which the agent never runs as a call.
	verb, ok := netplugin.VerbOf(p)
	return verb.Name, ok
}

// runInProcess serves one call with cniwrap.Run.
func (s *Server) runInProcess(ctx context.Context, c *call, req *Request, verb string, max int) *Response {
	resp := &Response{InProcess: true}
	stdout := &cappedBuffer{max: max}
	stderr := &cappedBuffer{max: max}
	callCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exec := &callExec{call: c, stderr: stderr, max: max}
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
		if c.view >= 0 {
			// The wrapper's own look at the pod's netns (is it one, its
			// free ethN) happens on this goroutine: in the call's view,
			// on a thread that ends with it.
			runtime.LockOSThread()
			if err := enterView(c.view); err != nil {
				fmt.Fprintf(stderr, "kurma-agent: %v\n", err)
				done <- 1
				return
			}
		}
		done <- cniwrap.Run(callCtx, verb, req.Args, bytes.NewReader(req.Stdin), stdout, stderr, cniwrap.EnvFrom(s.Env), exec)
	}()
	select {
	case resp.ExitCode = <-done:
	case <-ctx.Done():
		resp.TimedOut = true
		cancel()
		c.kill()
		select {
		case <-done:
		case <-time.After(inProcessGrace):
			// Its processes are dead and it can start no more (the call
			// is dead); only Go code of ours is left running.
			s.logf("in-process %s: the wrapper did not return %s after its processes were killed", req.Path, inProcessGrace)
		}
		resp.ExitCode = 0
	}
	resp.Stdout, resp.StdoutTruncated = stdout.snapshot()
	resp.Stderr, resp.StderrTruncated = stderr.snapshot()
	return resp
}

// callExec runs one in-process call's CNI plugins for libcni.
type callExec struct {
	call   *call
	stderr io.Writer // the call's stderr: plugin stderr is streamed there
	max    int
	version.PluginDecoder
}

var _ invoke.Exec = (*callExec)(nil)

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
	return cniwrap.FindPlugin(plugin, paths)
}

// run starts one plugin process in the call and waits until it exited and
// every holder closed its stdout and stderr, or until ctx ends (then the
// whole call is killed). err is only a failure to start it.
func (e *callExec) run(ctx context.Context, pluginPath string, stdinData []byte, environ []string, tail io.Writer) ([]byte, unix.WaitStatus, error) {
	if ctx.Err() != nil {
		return nil, 0, errCallKilled
	}
	stdout := &cappedBuffer{max: e.max}
	p, err := e.call.start(spawn{
		path: pluginPath, argv: []string{pluginPath}, env: environ,
		stdin: stdinData, stdout: stdout, stderr: io.MultiWriter(e.stderr, tail),
	})
	if err != nil {
		return nil, 0, err
	}
	ws, _ := e.call.wait(ctx, p)
	out, _ := stdout.snapshot()
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
