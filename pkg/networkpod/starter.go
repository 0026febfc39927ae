package networkpod

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/networkpod/initd"
)

// starter is kurmad's side of kurma-init (package initd): the one process
// that creates the Host's containers and runs their inits, started at the
// first start and kept until the Host stops or detaches. libcontainer
// re-executes the binary that runs it for every container process: run by
// kurma-init, a container start costs the start of kurma-init's few
// packages rather than kurmad's hundreds.
type starter struct {
	path string
	log  logrus.FieldLogger

	mu     sync.Mutex
	conn   *os.File // ours of the SOCK_SEQPACKET pair; nil until started
	cmd    *exec.Cmd
	next   uint64
	wait   map[uint64]chan initd.Response
	closed bool
}

func newStarter(path string, log logrus.FieldLogger) *starter {
	return &starter{path: path, log: log, wait: map[uint64]chan initd.Response{}}
}

// run has kurma-init create the container and start its init with files
// (stdin, stdout, stderr, then its extra files); it returns the init's host
// PID. On failure nothing of the container is left but its state dir's
// removal, which the caller's teardown does.
func (s *starter) run(ctx context.Context, req *initd.Request, files []*os.File) (int, error) {
	seq, ch, err := s.send(req, files)
	if err != nil {
		return 0, err
	}
	select {
	case r := <-ch:
		if r.Err != "" {
			return 0, errors.New(r.Err)
		}
		return r.Pid, nil
	case <-ctx.Done():
		// The start goes on in kurma-init: its answer is awaited, so that
		// the caller's teardown (destroyContainer) finds the container
		// whole. Torn down before kurma-init made it, it would be made
		// after, and left running with its cgroups and mounts.
		t := time.NewTimer(abandonedStartWait)
		defer t.Stop()
		select {
		case <-ch:
		case <-t.C:
			s.mu.Lock()
			delete(s.wait, seq)
			s.mu.Unlock()
			s.log.WithField("container", req.Container).Warn("kurma-init did not answer a cancelled start; its container may be left")
		}
		return 0, ctx.Err()
	}
}

// abandonedStartWait bounds how long a cancelled start waits for
// kurma-init's answer (a start takes a fraction of a second).
const abandonedStartWait = 10 * time.Second

// ensure starts kurma-init unless it runs: ahead of the first start that
// needs it (Host.Prepare).
func (s *starter) ensure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.conn != nil {
		return nil
	}
	return s.startLocked()
}

// send writes req (kurma-init started first if need be) and registers its
// answer's channel.
func (s *starter) send(req *initd.Request, files []*os.File) (uint64, chan initd.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, errors.New("kurma-init: the plugin host is stopping")
	}
	if s.conn == nil {
		if err := s.startLocked(); err != nil {
			return 0, nil, err
		}
	}
	s.next++
	req.Seq = s.next
	req.Process.Files = len(files)
	b, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	if len(b) > initd.MaxMessage {
		return 0, nil, fmt.Errorf("kurma-init: a request of %d bytes, over %d", len(b), initd.MaxMessage)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	ch := make(chan initd.Response, 1)
	s.wait[req.Seq] = ch
	if err := unix.Sendmsg(int(s.conn.Fd()), b, unix.UnixRights(fds...), nil, 0); err != nil {
		delete(s.wait, req.Seq)
		return 0, nil, fmt.Errorf("kurma-init: send the request: %w", err)
	}
	return req.Seq, ch, nil
}

// startLocked starts kurma-init with its end of a fresh socket pair as
// fd 3; s.mu is held.
func (s *starter) startLocked() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("kurma-init: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "kurma-init"), os.NewFile(uintptr(fds[1]), "kurma-init")
	defer theirs.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		ours.Close()
		return err
	}
	defer errW.Close()
	cmd := exec.Command(s.path, "serve")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = errW
	// Its own process group: a terminal's ^C meant for kurmad's group is
	// not its. It ends when kurmad closes the socket, or goes.
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		ours.Close()
		errR.Close()
		return fmt.Errorf("kurma-init: %w (build it with `go build -o %s ./cmd/kurma-init`)", err, s.path)
	}
	s.conn, s.cmd = ours, cmd
	go s.logLines(errR)
	go s.read(ours)
	go func() { _ = cmd.Wait() }()
	return nil
}

// read hands each answer to its request until the socket ends; then it
// fails those still waiting, and the next run starts kurma-init again.
func (s *starter) read(conn *os.File) {
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(int(conn.Fd()), buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			s.mu.Lock()
			if s.conn == conn {
				s.conn, s.cmd = nil, nil
			}
			conn.Close()
			waiting := s.wait
			s.wait = map[uint64]chan initd.Response{}
			s.mu.Unlock()
			for _, ch := range waiting {
				ch <- initd.Response{Err: "kurma-init ended before it answered"}
			}
			return
		}
		var r initd.Response
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			s.log.WithError(err).Warn("kurma-init: an answer that is not one")
			continue
		}
		s.mu.Lock()
		ch := s.wait[r.Seq]
		delete(s.wait, r.Seq)
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// logLines logs kurma-init's stderr, a JSON line each (libcontainer's, and
// the inits' it forwards). An init's fatal line (nsexec, when a container
// fails to start) is fatal to that start, which kurmad retries, not to
// kurmad: it is logged as an error, with its level in init_level.
func (s *starter) logLines(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		var line struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		text := sc.Text()
		if json.Unmarshal([]byte(text), &line) != nil || line.Msg == "" {
			s.log.WithField("component", "kurma-init").Warn(strings.TrimSpace(text))
			continue
		}
		l := s.log.WithField("component", "kurma-init")
		switch line.Level {
		case "debug", "trace":
			l.Debug(line.Msg)
		case "info":
			l.Info(line.Msg)
		case "warning":
			l.Warn(line.Msg)
		case "error":
			l.Error(line.Msg)
		default:
			l.WithField("init_level", line.Level).Error(line.Msg)
		}
	}
}

// close ends kurma-init (it finishes the starts under way): the
// containers it started stay, each init reparented.
func (s *starter) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		// The reader, woken, closes it; kurma-init reads its end.
		_ = unix.Shutdown(int(s.conn.Fd()), unix.SHUT_RDWR)
		s.conn = nil
	}
}
