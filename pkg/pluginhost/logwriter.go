package pluginhost

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// A container's output reaches kurmad's log at most at this rate: logBurst
// lines at once, then logRate lines a second. A main executable that
// floods its stdout or stderr cannot fill the host's disk or drown every
// other message through kurmad's log; the lines over the rate are counted,
// and the count is logged with the next line that gets through.
const (
	logRate  = 20
	logBurst = 200
)

// logWriter turns a process's output into one log line per line (with the
// network and stream fields), rate-limited, and keeps the last lines for
// failure reasons (all of them, whatever the rate).
type logWriter struct {
	log  logrus.FieldLogger
	keep int
	now  func() time.Time // tests

	mu      sync.Mutex
	buf     []byte
	last    []string
	tokens  float64
	filled  time.Time // when tokens was last topped up
	dropped int
}

func newLogWriter(log logrus.FieldLogger, keep int) *logWriter {
	return &logWriter{log: log, keep: keep, now: time.Now, tokens: logBurst}
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
	if !w.allow() {
		w.dropped++
		return
	}
	if w.dropped > 0 {
		w.log.WithField("dropped", w.dropped).Warnf("%d lines of output were not logged (over %d lines a second)", w.dropped, logRate)
		w.dropped = 0
	}
	w.log.Info(s)
}

// allow takes a token for one line, when there is one.
func (w *logWriter) allow() bool {
	now := w.now()
	if !w.filled.IsZero() {
		w.tokens = min(logBurst, w.tokens+now.Sub(w.filled).Seconds()*logRate)
	}
	w.filled = now
	if w.tokens < 1 {
		return false
	}
	w.tokens--
	return true
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
