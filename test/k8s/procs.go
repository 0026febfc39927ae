package k8stest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ownChildren are the processes this program started with os/exec and
// will Wait for: the orphan reaper leaves them alone.
var ownChildren = &pidSet{m: map[int]bool{}}

type pidSet struct {
	mu sync.Mutex
	m  map[int]bool
}

func (s *pidSet) has(p int) bool { return s.m[p] } // caller holds mu (reapOrphans runs under it)

// start starts cmd and records it as ours, so the reaper never waits for it.
func start(cmd *exec.Cmd) error {
	ownChildren.mu.Lock()
	defer ownChildren.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	ownChildren.m[cmd.Process.Pid] = true
	return nil
}

func wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	ownChildren.mu.Lock()
	delete(ownChildren.m, cmd.Process.Pid)
	ownChildren.mu.Unlock()
	return err
}

// runCmd runs cmd to its end and returns its combined output.
func runCmd(cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := start(cmd); err != nil {
		return nil, err
	}
	err := wait(cmd)
	return out.Bytes(), err
}

// reapLoop reaps the orphans this subreaper inherits (exited shims) until
// ctx ends.
func reapLoop(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ownChildren.mu.Lock()
			reapOrphans()
			ownChildren.mu.Unlock()
		}
	}
}

// daemon is a long-running component of the cluster, logging to a file.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startDaemon(name, logPath string, cmd *exec.Cmd) (*daemon, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a Ctrl-C at the terminal reaches only the
	// program, which stops the cluster in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := start(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		d.err = wait(cmd)
		f.Close()
		close(d.done)
	}()
	return d, nil
}

func (d *daemon) running() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILL.
func (d *daemon) stop(grace time.Duration) {
	if !d.running() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// tail is the last n lines of the daemon's log.
func (d *daemon) tail(n int) string {
	return tailFile(d.log, n)
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
