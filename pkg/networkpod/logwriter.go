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

// Write keeps p's lines and logs them; the logging happens outside the
// writer's lock, so that a slow log sink never holds up Tail (a failure's
// reason is built from it while the rest of the output is still arriving).
// One goroutine writes each stream, so its lines stay in order.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, p...)
	var out []logged
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		out = w.line(out, string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // an endless line: log it in pieces
		out = w.line(out, string(w.buf))
		w.buf = nil
	}
	w.mu.Unlock()
	for _, l := range out {
		if l.dropped > 0 {
			w.log.WithField("dropped", l.dropped).Warnf("%d lines of output were not logged (over %d lines a second)", l.dropped, logRate)
		}
		w.log.Info(l.text)
	}
	return len(p), nil
}

// logged is a line to log, after the count of lines left out before it.
type logged struct {
	text    string
	dropped int
}

// line keeps s and adds it to out when the rate lets it through (w.mu
// held).
func (w *logWriter) line(out []logged, s string) []logged {
	s = strings.TrimRight(s, "\r")
	if s == "" {
		return out
	}
	if w.keep > 0 {
		w.last = append(w.last, s)
		if len(w.last) > w.keep {
			w.last = w.last[len(w.last)-w.keep:]
		}
	}
	if !w.limit.allow() {
		w.dropped++
		return out
	}
	out = append(out, logged{text: s, dropped: w.dropped})
	w.dropped = 0
	return out
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
