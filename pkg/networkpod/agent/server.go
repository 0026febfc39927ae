package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kurma-project/kurma/pkg/cniwrap"
	"golang.org/x/sys/unix"
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
	// /opt/network/{add,del,check} to be ("" → none). When it is the
	// version this agent was built with (cniwrap.ProtocolVersion), calls of
	// exactly those paths run the wrapper's code in-process (see
	// inprocess.go) instead of starting the wrapper binary.
	CNIWrapper string

	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	calls   map[*callTree]struct{} // running calls
	roots   map[int]*callTree      // the running calls' root processes
}

// ListenAndServe makes the process a child subreaper (so that processes a
// call orphans, e.g. a plugin's setsid'd background child, become ours and
// are reaped), starts the reaper, listens on the unix socket path (replacing
// a stale one) and serves calls until accepting fails.
//
// It uses raw sockets rather than package net on purpose: without net the
// agent links no cgo even when built with CGO_ENABLED=1, so the binary stays
// static and runs in images without a libc.
func (s *Server) ListenAndServe(path string) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	s.mu.Lock()
	if s.waiters == nil {
		s.waiters = make(map[int]chan unix.WaitStatus)
	}
	if s.calls == nil {
		s.calls = make(map[*callTree]struct{})
		s.roots = make(map[int]*callTree)
	}
	s.mu.Unlock()
	if s.CNIWrapper != "" && !s.inProcess() {
		s.logf("image declares cni-wrapper %s; this agent serves %s in-process: every call forks the image's wrapper",
			s.CNIWrapper, cniwrap.ProtocolVersion)
	}
	go s.reap()

	_ = os.Remove(path)
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: path}); err != nil {
		return fmt.Errorf("bind %s: %w", path, err)
	}
	if err := unix.Listen(lfd, 256); err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	for {
		fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
			continue
		}
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
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

func (s *Server) handle(conn io.ReadWriteCloser) {
	defer conn.Close()
	var req Request
	dec := json.NewDecoder(conn)
	if err := dec.Decode(&req); err != nil {
		if !errors.Is(err, io.EOF) { // EOF: a liveness probe
			s.logf("bad request: %v", err)
		}
		return
	}
	// The connection closing (kurmad gave up) cancels the call.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, io.MultiReader(dec.Buffered(), conn))
		cancel()
	}()
	resp := s.Run(ctx, &req)
	_ = json.NewEncoder(conn).Encode(resp)
}

// Run runs one call to completion: the process exited and its stdout and
// stderr were closed by every holder. On timeout or ctx cancellation it kills
// the call's process group and every process holding its pipes, and waits
// until they are gone.
func (s *Server) Run(ctx context.Context, req *Request) *Response {
	start := time.Now()
	max := req.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	if verb, ok := s.inProcessVerb(req.Path); ok {
		return s.runInProcess(ctx, req, verb, max, start)
	}
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
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		resp.Error = err.Error()
		return resp
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		stdoutR.Close()
		stdoutW.Close()
		resp.Error = err.Error()
		return resp
	}
	// Only the output pipes identify the call's processes: we hold their
	// read ends until the call is over, so their inode numbers cannot be
	// reused by another call's pipes meanwhile (the stdin pipe's could).
	tree := newCallTree()
	for k := range pipeInodes(stdoutR, stderrR) {
		tree.pipes[k] = true
	}

	w := make(chan unix.WaitStatus, 1)
	s.mu.Lock()
	pid, err := syscall.ForkExec(path, append([]string{path}, req.Args...), &syscall.ProcAttr{
		Dir:   "/",
		Env:   s.Env,
		Files: []uintptr{stdinR.Fd(), stdoutW.Fd(), stderrW.Fd()},
		// Its own process group: the first thing killed on timeout.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err == nil {
		s.waiters[pid] = w
		tree.addRoot(pid)
		s.calls[tree] = struct{}{}
		s.roots[pid] = tree
	}
	s.mu.Unlock()
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdinW.Close()
		stdoutR.Close()
		stderrR.Close()
		resp.Error = fmt.Sprintf("start %s: %v", req.Path, err)
		return resp
	}

	trackDone := make(chan struct{})
	go s.track(tree, trackDone)
	defer func() {
		close(trackDone)
		s.endCall(tree)
	}()

	go func() {
		// A plugin that does not read its stdin must not block the call:
		// EPIPE is fine.
		_, _ = stdinW.Write(req.Stdin)
		stdinW.Close()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); resp.Stdout, resp.StdoutTruncated = readCapped(stdoutR, max) }()
	go func() { defer wg.Done(); resp.Stderr, resp.StderrTruncated = readCapped(stderrR, max) }()
	outDone := make(chan struct{})
	go func() { wg.Wait(); close(outDone) }()

	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	var ws unix.WaitStatus
	exited, closed := false, false
	for !exited || !closed {
		select {
		case ws = <-w:
			exited = true
		case <-outDone:
			closed = true
		case <-timer.C:
			resp.TimedOut = true
		case <-ctx.Done():
			resp.TimedOut = true
		}
		if resp.TimedOut {
			break
		}
	}
	if resp.TimedOut {
		s.killCall(tree)
		if !exited {
			ws = <-w
		}
		<-outDone // every writer is dead now
	}
	stdoutR.Close()
	stderrR.Close()
	switch {
	case ws.Signaled():
		resp.ExitCode = -1
		resp.Signal = unix.SignalName(ws.Signal())
	default:
		resp.ExitCode = ws.ExitStatus()
	}
	resp.Duration = time.Since(start)
	return resp
}

// readCapped reads r to EOF keeping at most max bytes.
func readCapped(r io.Reader, max int) ([]byte, bool) {
	var buf []byte
	chunk := make([]byte, 32<<10)
	truncated := false
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			room := max - len(buf)
			if n > room {
				n = room
				truncated = true
			}
			buf = append(buf, chunk[:n]...)
		}
		if err != nil {
			return buf, truncated
		}
	}
}

// killCall kills a call's whole tree (see tree.go): its recorded process
// tree, its process group, every process holding one of its pipes, and
// orphans of it reparented to us — until none is left, then waits until
// they are gone from /proc (reaped by us: they are our children or orphans
// reparented to us).
func (s *Server) killCall(t *callTree) {
	self := os.Getpid()
	victims := map[int]bool{}
	s.mu.Lock()
	t.dead = true
	inodes := make(map[string]bool, len(t.pipes))
	for k := range t.pipes {
		inodes[k] = true
	}
	s.mu.Unlock()
	for range 50 {
		procs := listProcs(self)
		holders := pipeHolders(inodes, self)
		groups := map[int]bool{}
		for _, p := range procs {
			groups[p.pgid] = true
		}
		s.mu.Lock()
		t.grow(procs)
		// Only groups still alive: a gone group's number may be reused.
		var pgids []int
		for r := range t.roots {
			if groups[r] {
				pgids = append(pgids, r)
			}
		}
		for _, pid := range holders {
			t.seen[pid] = true
		}
		var kill []int
		for _, p := range procs {
			if t.seen[p.pid] || s.orphanOf(t, p, self) {
				t.seen[p.pid] = true
				kill = append(kill, p.pid)
			}
		}
		s.mu.Unlock()
		for _, g := range pgids {
			_ = unix.Kill(-g, unix.SIGKILL)
		}
		for _, pid := range kill {
			victims[pid] = true
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if len(kill) == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pid := range victims {
		for exists(pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// endCall forgets a finished call and closes the pipe ends it kept.
func (s *Server) endCall(t *callTree) {
	s.mu.Lock()
	delete(s.calls, t)
	for r := range t.roots {
		if s.roots[r] == t {
			delete(s.roots, r)
		}
	}
	files := t.files
	t.files = nil
	s.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
}

// pipeInodes names the pipes as /proc/<pid>/fd links show them.
func pipeInodes(files ...*os.File) map[string]bool {
	out := make(map[string]bool)
	for _, f := range files {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err == nil {
			out["pipe:["+strconv.FormatUint(st.Ino, 10)+"]"] = true
		}
	}
	return out
}

// pipeHolders lists the processes (but self) with an fd on one of the pipes.
func pipeHolders(inodes map[string]bool, self int) []int {
	procs, _ := os.ReadDir("/proc")
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && inodes[link] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

func exists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
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
