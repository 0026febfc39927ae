package cniwrap

import (
	"bytes"
	"fmt"
	"io"
	"sort"

	"github.com/sirupsen/logrus"
)

// newLogger returns a logger writing one plain line per event to w (the
// daemon shows the wrapper's stderr to operators as is):
//
//	cni-wrapper add: error: network "mynet": add eth0 ...: <plugin message> code=7
func newLogger(w io.Writer) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(w)
	l.SetFormatter(lineFormatter{})
	l.SetLevel(logrus.InfoLevel)
	return l
}

// lineFormatter prints "cni-wrapper <op>: <level>: <msg> k=v ...".
type lineFormatter struct{}

func (lineFormatter) Format(e *logrus.Entry) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("cni-wrapper")
	if op, ok := e.Data["op"]; ok {
		fmt.Fprintf(&b, " %v", op)
	}
	fmt.Fprintf(&b, ": %s: %s", e.Level, e.Message)
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		if k != "op" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fmt.Sprint(e.Data[k])
		if needsQuote(v) {
			v = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r <= ' ' || r == '"' || r == '=' {
			return true
		}
	}
	return false
}
