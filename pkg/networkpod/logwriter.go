package networkpod

import (
	"bytes"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// logWriter turns a process's output into one log line per line (with the
// network and stream fields) and keeps the last lines for failure reasons.
type logWriter struct {
	log  logrus.FieldLogger
	keep int

	mu   sync.Mutex
	buf  []byte
	last []string
}

func newLogWriter(log logrus.FieldLogger, keep int) *logWriter {
	return &logWriter{log: log, keep: keep}
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
	w.log.Info(s)
	if w.keep > 0 {
		w.last = append(w.last, s)
		if len(w.last) > w.keep {
			w.last = w.last[len(w.last)-w.keep:]
		}
	}
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
