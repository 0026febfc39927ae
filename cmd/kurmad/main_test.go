package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/opencontainers/runc/libcontainer/logs"
	"github.com/sirupsen/logrus"
)

// TestInitFatalNotFatal: a container init's "level":"fatal" line (what
// nsexec writes when a plugin container fails to start), forwarded by
// libcontainer as it does for every container kurmad starts, shows as an
// error of kurmad's log, in its format, not as fatal: kurmad goes on.
func TestInitFatalNotFatal(t *testing.T) {
	for _, json := range []bool{false, true} {
		var out bytes.Buffer
		newLogger(logrus.InfoLevel, json, &out)
		r, w := io.Pipe()
		done := logs.ForwardLogs(r)
		_, _ = w.Write([]byte(`{"level":"fatal","msg":"nsexec-1[42]: failed to setns: Invalid argument"}` + "\n" + `{"level":"debug","msg":"quiet"}` + "\n"))
		w.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got := out.String()
		want := `level=error msg="nsexec-1[42]: failed to setns: Invalid argument" init_level=fatal`
		if json {
			want = `"init_level":"fatal","level":"error","msg":"nsexec-1[42]: failed to setns: Invalid argument"`
		}
		if !strings.Contains(got, want) || strings.Contains(got, "quiet") || strings.Count(got, "\n") != 1 {
			t.Errorf("json %v: kurmad's log %q, want one line with %q", json, got, want)
		}
	}
	logrus.SetOutput(io.Discard)
}
