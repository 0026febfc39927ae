package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Server runs plugin calls. It must be the only thing in its process that
// starts child processes: it reaps with wait4(-1) (see reap), which is only
// safe when every child of the process is its own. kurma-agent is such a
// process; kurmad is not, and never runs a Server.
type Server struct {
	// Env is the environment of every call (the image's).
	Env []string
	// Log receives one line per problem; nil → discarded.
	Log func(format string, args ...any)
	// CNIWrapper is the cni-wrapper protocol version the image declares its
	// /opt/network/{add,del,check,gc,status} to be ("" → none). When it is the
	// version this agent was built with (netplugin.WrapperVersion), calls of
	// exactly those paths run the wrapper's code in-process (see
	// inprocess.go) instead of starting the wrapper binary.
	CNIWrapper string
	// Cgroups makes each call's cgroup (see cgroup.go). Required.
	Cgroups *CallGroups
	// Hub, when set, is what a watch of the agent gets (watch.go): a
	// connection whose first frame is FrameWatch is handed to it.
	Hub *Hub
	// BeforeReap, when set, runs once, when the first connection comes
	// (kurmad's watch), before the reaper starts: the last moment an exited
	// child is still a zombie for certain (MainProcess.Ended).
	BeforeReap func()
	reapOnce   sync.Once

	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
}

// Serve makes the process a child subreaper (so that processes a call
// orphans, e.g. a plugin's setsid'd background child, become ours and are
// reaped), starts the reaper with the first connection and serves calls
// on the listening unix socket
// lfd (kurmad binds it on the host and passes it in, so that nothing in the
// container can replace it) until accepting fails.
//
// It uses raw sockets rather than package net's listener on purpose: the
// socket is an inherited descriptor, and the accept loop needs nothing
// more.
func (s *Server) Serve(lfd int) error {
	if s.Cgroups == nil {
		return errors.New("no call cgroups")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	unix.CloseOnExec(lfd) // never inherited by a plugin
	s.mu.Lock()
	s.initLocked()
	s.mu.Unlock()
	if s.CNIWrapper != "" && !s.inProcess() {
		s.logf("image declares cni-wrapper %s; this agent serves %s in-process: every call forks the image's wrapper",
			s.CNIWrapper, netplugin.WrapperVersion)
	}
	s.Cgroups.Premake(s.logf) // once the first call comes
	for {
		fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
			continue
		}
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		s.reapOnce.Do(func() {
			if s.BeforeReap != nil {
				s.BeforeReap()
			}
			go s.reap()
		})
		// Non-blocking: os.NewFile puts it on the runtime poller.
		go s.handle(os.NewFile(uintptr(fd), "conn"))
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}

// reap collects every exited child: the calls' processes (their status goes
// to the call waiting for that pid) and orphans reparented to us as
// subreaper (discarded). The lock is held around each batch so a status can
// never arrive before start registered its pid.
func (s *Server) reap() {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, unix.SIGCHLD)
	tick := time.NewTicker(time.Second) // a lost SIGCHLD never strands a zombie
	defer tick.Stop()
	for {
		s.mu.Lock()
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if w, ok := s.waiters[pid]; ok {
				delete(s.waiters, pid)
				w <- ws
			}
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-tick.C:
		}
	}
}

// handle serves one connection: its calls, each on a goroutine of its
// own, until the client closes it or a frame cannot be read (see the
// package doc); then it kills every call still running and returns once
// they are gone.
func (s *Server) handle(conn *os.File) {
	defer conn.Close()
	rc := newRecvConn(conn) // each call's view comes with its frame
	defer rc.close()
	r := bufio.NewReaderSize(rc, 64<<10)
	cs := &connCalls{conn: conn, cancels: map[uint64]context.CancelFunc{}, held: map[uint64]chan struct{}{}}
	defer cs.end() // the connection is gone: kill what runs
	for first := true; ; first = false {
		h, err := ReadHeader(r)
		if errors.Is(err, io.EOF) {
			return // closed between frames, or a liveness probe
		}
		if first && err == nil && h.Kind == FrameWatch && s.Hub != nil {
			s.handOver(conn, r, h)
			return
		}
		var body []byte
		if err == nil {
			body, err = ReadBody(r, h, MaxRequestSize)
		}
		if err != nil {
			s.logf("exec agent connection: %v", err)
			cs.answer(h.ID, &Response{Error: err.Error()})
			return
		}
		switch h.Kind {
		case FrameCancel:
			cs.cancel(h.ID)
		case FrameRelease:
			cs.release(h.ID)
		case FrameCall:
			s.startCall(cs, rc, h.ID, body)
		default:
			s.logf("exec agent connection: a frame of unknown kind %d", h.Kind)
			cs.answer(h.ID, &Response{Error: fmt.Sprintf("%v: a frame of unknown kind %d", ErrBadRequest, h.Kind)})
			return
		}
	}
}

// handOver gives a watch (a connection whose first frame, h, is
// FrameWatch) to the hub: the connection is the hub's until it ends.
func (s *Server) handOver(conn *os.File, r *bufio.Reader, h Header) {
	if _, err := ReadBody(r, h, 64); err != nil {
		return
	}
	s.Hub.Attach(conn, func() error {
		_, err := r.Read(make([]byte, 1))
		for err == nil {
			_, err = r.Read(make([]byte, 512))
		}
		return err
	})
}

// startCall decodes call id's request (body, and its view from rc when it
// has one) and runs it on a goroutine of its own, which answers it; a
// request it cannot decode is answered at once.
func (s *Server) startCall(cs *connCalls, rc *recvConn, id uint64, body []byte) {
	req, err := DecodeRequest(body)
	view := -1
	if err == nil && req.View {
		if view = rc.take(); view < 0 {
			err = fmt.Errorf("%w: the request has a view but no descriptor came with it", ErrBadRequest)
		}
	}
	if err != nil {
		s.logf("%v", err)
		cs.answer(id, &Response{Error: err.Error()})
		return
	}
	ctx, cancel, hold := cs.begin(id, req.Held)
	go func() {
		defer cs.wg.Done()
		defer cancel()
		if view >= 0 {
			defer unix.Close(view)
		}
		resp := s.run(ctx, req, view, hold)
		cs.forget(id)
		cs.answer(id, resp)
	}()
}

// connCalls are the calls of one connection: how to cancel each, the held
// ones not released yet, and the one writer of their answers.
type connCalls struct {
	conn    *os.File
	wmu     sync.Mutex // one answer written at a time
	mu      sync.Mutex // guards cancels and held
	cancels map[uint64]context.CancelFunc
	held    map[uint64]chan struct{} // held calls not released yet
	wg      sync.WaitGroup           // the calls running
}

// answer writes call id's answer.
func (cs *connCalls) answer(id uint64, resp *Response) {
	buf := AppendAnswer(nil, id, resp)
	cs.wmu.Lock()
	defer cs.wmu.Unlock()
	_, _ = cs.conn.Write(buf)
}

// begin registers call id as running: the context that ends it and its
// cancel, and, for a held call, the channel its release closes (nil when
// it is not held). The call's goroutine calls wg.Done once it answered.
func (cs *connCalls) begin(id uint64, held bool) (context.Context, context.CancelFunc, chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	var hold chan struct{}
	cs.mu.Lock()
	cs.cancels[id] = cancel
	if held {
		hold = make(chan struct{})
		cs.held[id] = hold
	}
	cs.mu.Unlock()
	cs.wg.Add(1)
	return ctx, cancel, hold
}

// forget drops call id, which has ended: a cancel or release of it that
// comes now finds nothing.
func (cs *connCalls) forget(id uint64) {
	cs.mu.Lock()
	delete(cs.cancels, id)
	delete(cs.held, id)
	cs.mu.Unlock()
}

// cancel cancels call id (a FrameCancel): the call is killed and answered.
func (cs *connCalls) cancel(id uint64) {
	cs.mu.Lock()
	if cancel := cs.cancels[id]; cancel != nil {
		cancel()
	}
	cs.mu.Unlock()
}

// release releases held call id (a FrameRelease): its processes get their
// stdin.
func (cs *connCalls) release(id uint64) {
	cs.mu.Lock()
	if ch := cs.held[id]; ch != nil {
		close(ch)
		delete(cs.held, id)
	}
	cs.mu.Unlock()
}

// end cancels every call still running and waits until each answered.
func (cs *connCalls) end() {
	cs.mu.Lock()
	for _, cancel := range cs.cancels {
		cancel()
	}
	cs.mu.Unlock()
	cs.wg.Wait()
}

// Run runs one call to completion: the process exited and its stdout and
// stderr were closed by every holder. On timeout or ctx cancellation every
// process of the call is killed (its cgroup), and Run returns once they are
// gone. Whatever a call leaves running when it ends is killed too.
// Run does not hold a call (Request.Held is for calls over a connection).
func (s *Server) Run(ctx context.Context, req *Request) *Response {
	return s.run(ctx, req, -1, nil)
}

// run is Run with every process of the call started in the mount
// namespace view (-1: the agent's own), and given its stdin once hold is
// closed (nil: at once).
func (s *Server) run(ctx context.Context, req *Request, view int, hold <-chan struct{}) *Response {
	start := time.Now()
	max := req.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	c, err := s.newCall(view, hold)
	if err != nil {
		return &Response{Error: err.Error()}
	}
	defer c.end()
	var resp *Response
	if verb, ok := s.inProcessVerb(req.Path); ok {
		resp = s.runInProcess(ctx, c, req, verb, max)
	} else {
		resp = s.runForkExec(ctx, c, req, max)
	}
	resp.LimitsHit = c.group.limitsHit()
	resp.Duration = time.Since(start)
	return resp
}

// runForkExec serves a call by starting req.Path.
func (s *Server) runForkExec(ctx context.Context, c *call, req *Request, max int) *Response {
	resp := &Response{}
	path := req.Path
	if !strings.Contains(path, "/") {
		lp, err := lookPath(path, s.Env)
		if err != nil {
			resp.Error = err.Error()
			return resp
		}
		path = lp
	}
	stdout, stderr := &cappedBuffer{max: max}, &cappedBuffer{max: max}
	p, err := c.start(spawn{
		path: path, argv: append([]string{path}, req.Args...), env: s.Env,
		stdin: req.Stdin, stdout: stdout, stderr: stderr,
	})
	if err != nil {
		resp.Error = startErr(req.Path, err)
		return resp
	}
	ws, killed := c.wait(ctx, p)
	resp.TimedOut = killed
	resp.Stdout, resp.StdoutTruncated = stdout.snapshot()
	resp.Stderr, resp.StderrTruncated = stderr.snapshot()
	if ws.Signaled() {
		resp.ExitCode = -1
		resp.Signal = unix.SignalName(ws.Signal())
	} else {
		resp.ExitCode = ws.ExitStatus()
	}
	return resp
}

// lookPath finds file in the PATH of env (exec.LookPath uses our own env).
func lookPath(file string, env []string) (string, error) {
	path := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[len("PATH="):]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}
