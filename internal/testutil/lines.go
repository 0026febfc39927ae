package testutil

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Lines is an io.Writer for a process's output that passes everything on to
// out (when not nil) and lets a test wait for a line: Expect returns a
// channel that is closed when a line containing a text is written. That is
// how tests wait for "ready" instead of sleeping.
type Lines struct {
	mu      sync.Mutex
	out     io.Writer
	partial []byte
	waits   []lineWait
}

type lineWait struct {
	text string
	seen chan struct{}
}

// maxPartial bounds the unfinished line Lines keeps to match against: a
// longer line is matched by its first maxPartial bytes.
const maxPartial = 64 << 10

// NewLines returns a Lines that copies to out (which may be nil).
func NewLines(out io.Writer) *Lines { return &Lines{out: out} }

// Expect returns a channel closed by the first line written after this
// call that contains text. Call it before the line can be written (before
// starting the process, or before the action that makes it log).
func (l *Lines) Expect(text string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := lineWait{text: text, seen: make(chan struct{})}
	l.waits = append(l.waits, w)
	return w.seen
}

// Write passes p on to out and matches every line p completes.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.out != nil {
		if _, err := l.out.Write(p); err != nil {
			return 0, err
		}
	}
	rest := p
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		l.partial = append(l.partial, rest[:i]...)
		l.match(l.partial)
		l.partial = l.partial[:0]
		rest = rest[i+1:]
	}
	if room := maxPartial - len(l.partial); room > 0 {
		l.partial = append(l.partial, rest[:min(len(rest), room)]...)
	}
	return len(p), nil
}

// Close matches an unfinished last line.
func (l *Lines) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.match(l.partial)
		l.partial = nil
	}
	return nil
}

func (l *Lines) match(line []byte) {
	kept := l.waits[:0]
	for _, w := range l.waits {
		if bytes.Contains(line, []byte(w.text)) {
			close(w.seen)
			continue
		}
		kept = append(kept, w)
	}
	l.waits = kept
}

// StartUntil starts cmd with its stderr going through a Lines and waits up
// to timeout for a line containing text; t fails if cmd exits first or the
// time passes. It returns cmd's stderr (all of it once cmd ended) and a
// channel that gets cmd.Wait's result. cmd is killed when t ends.
func StartUntil(t testing.TB, cmd *exec.Cmd, text string, timeout time.Duration) (*SyncBuffer, <-chan error) {
	t.Helper()
	stderr := &SyncBuffer{}
	lines := NewLines(stderr)
	seen := lines.Expect(text)
	cmd.Stderr = lines
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-seen:
		return stderr, done
	case err := <-done:
		t.Fatalf("%s exited before saying %q: %v\n%s", cmd.Path, text, err, stderr.String())
	case <-time.After(timeout):
		t.Fatalf("%s did not say %q within %v:\n%s", cmd.Path, text, timeout, stderr.String())
	}
	return nil, nil
}

// LogWriter is an io.Writer for the logger of the code under test: each
// write (one log line) goes to t.Log, shown with a failing test or -v.
func LogWriter(t testing.TB) io.Writer { return testLog{t} }

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
