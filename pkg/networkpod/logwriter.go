package networkpod

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// A container's main executable's output reaches kurmad's log at most at
// this rate, stdout and stderr together (the exec agent's messages have a
// limit of their own): logBurst lines at once, then logRate lines a second. A main executable that
// floods its stdout or stderr cannot fill the host's disk or drown every
// other message through kurmad's log; the lines over the rate are counted,
// and the count is logged with the next line of the stream that gets
// through.
const (
	logRate  = 20
	logBurst = 200
)

// logLimiter is the rate log writers share (a main's stdout and stderr).
type logLimiter struct {
	mu     sync.Mutex
	tokens float64
	filled time.Time // when tokens was last topped up
}

func newLogLimiter() *logLimiter { return &logLimiter{tokens: logBurst} }

// allow takes a token for one line, when there is one.
func (l *logLimiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.filled.IsZero() {
		l.tokens = min(logBurst, l.tokens+now.Sub(l.filled).Seconds()*logRate)
	}
	l.filled = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// logWriter turns a process's output into one log line per line (with the
// network and stream fields), rate-limited by its container's limiter, and
// keeps the last lines for failure reasons (all of them, whatever the
// rate).
type logWriter struct {
	log   logrus.FieldLogger
	keep  int
	limit *logLimiter

	mu      sync.Mutex
	buf     []byte
	last    []string
	dropped int
}

func newLogWriter(log logrus.FieldLogger, keep int, limit *logLimiter) *logWriter {
	return &logWriter{log: log, keep: keep, limit: limit}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // an endless line: log it in pieces
		w.line(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}

func (w *logWriter) line(s string) {
	s = strings.TrimRight(s, "\r")
	if s == "" {
		return
	}
	if w.keep > 0 {
		w.last = append(w.last, s)
		if len(w.last) > w.keep {
			w.last = w.last[len(w.last)-w.keep:]
		}
	}
	if !w.limit.allow() {
		w.dropped++
		return
	}
	if w.dropped > 0 {
		w.log.WithField("dropped", w.dropped).Warnf("%d lines of output were not logged (over %d lines a second)", w.dropped, logRate)
		w.dropped = 0
	}
	w.log.Info(s)
}

// Tail returns the kept last lines (and any unterminated rest), joined.
func (w *logWriter) Tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := append([]string(nil), w.last...)
	if len(w.buf) > 0 {
		lines = append(lines, string(w.buf))
	}
	return strings.Join(lines, "; ")
}
