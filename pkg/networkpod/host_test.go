package networkpod

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

func TestExecBasics(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kte", Image: toolImage(t, "main"), Config: []byte(`{"name":"kte"}`)})
	st := statusOf(p, "kte")
	if st.State != StateRunning || st.Pid == 0 || st.Image != "sha512-test-main" {
		t.Fatalf("status %+v", st)
	}
	ctx := context.Background()

	tests := []struct {
		name       string
		path       string
		args       []string
		stdin      string
		wantStdout string
		wantStderr string
		check      func(t *testing.T, err error)
	}{
		{
			name: "echo", path: "/bin/echo", args: []string{"a", "b"}, stdin: `{"x":1}`,
			wantStdout: `{"x":1}`, wantStderr: "a b\n",
			check: func(t *testing.T, err error) {
				if err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "PATH lookup", path: "noop",
			check: func(t *testing.T, err error) {
				if err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "cni error", path: "/bin/fail", wantStderr: "boom\n",
			check: func(t *testing.T, err error) {
				var ee *netplugin.ExecError
				if !errors.As(err, &ee) || !errors.Is(err, netplugin.ErrPluginFailed) {
					t.Fatalf("want *netplugin.ExecError, got %v", err)
				}
				if ee.ExitCode != 1 || ee.CNIError == nil || ee.CNIError.Code != 11 || !strings.Contains(ee.Stderr, "boom") {
					t.Fatalf("bad netplugin.ExecError %+v", ee)
				}
				for _, s := range []string{`network "kte"`, "/bin/fail", "code 1", "no more addresses", "range 10.0.0.0/30 is full", "boom"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
			},
		},
		{
			// The Kurma spec: stdout and stderr give the message; a
			// plugin that prints plain text is not only in the transcript.
			name: "plain-text stdout", path: "/bin/failtext",
			check: func(t *testing.T, err error) {
				var ee *netplugin.ExecError
				if !errors.As(err, &ee) || ee.CNIError != nil {
					t.Fatalf("want *netplugin.ExecError without a CNI error, got %v", err)
				}
				if !strings.Contains(err.Error(), "no free address in 10.0.0.0/30") {
					t.Errorf("error %q lacks the plugin's plain-text stdout", err)
				}
				if len(err.Error()) > stderrExcerpt+256 {
					t.Errorf("error is %d bytes: the plugin's stdout is not bounded in it", len(err.Error()))
				}
			},
		},
		{
			name: "missing binary", path: "/bin/nope",
			check: func(t *testing.T, err error) {
				if !errors.Is(err, netplugin.ErrPluginFailed) || !strings.Contains(err.Error(), "/bin/nope") {
					t.Fatalf("got %v", err)
				}
			},
		},
		{
			name: "flood is capped", path: "/bin/flood",
			check: func(t *testing.T, err error) {
				if err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := p.Exec(ctx, testCall("kte", 0, tt.path, tt.args, []byte(tt.stdin)))
			tt.check(t, err)
			if tt.wantStdout != "" && string(stdout) != tt.wantStdout {
				t.Errorf("stdout %q, want %q", stdout, tt.wantStdout)
			}
			if tt.wantStderr != "" && string(stderr) != tt.wantStderr {
				t.Errorf("stderr %q, want %q", stderr, tt.wantStderr)
			}
			if tt.path == "/bin/flood" {
				if len(stdout) != 1<<20 || !strings.Contains(string(stderr), "stdout truncated") || !strings.Contains(string(stderr), "stderr truncated") {
					t.Errorf("flood: stdout %d bytes, stderr tail %q", len(stdout), tail(string(stderr), 100))
				}
			}
		})
	}

	// The largest plugin config the config accepts reaches the plugin:
	// the agent's request cap has room for it.
	t.Run("largest config", func(t *testing.T) {
		stdout, _, err := p.Exec(ctx, testCall("kte", 0, "/bin/echo", nil, []byte(strings.Repeat("c", netplugin.MaxConfigSize))))
		if err != nil || len(stdout) != 1<<20 {
			t.Fatalf("a %d-byte config: %d bytes back, %v", netplugin.MaxConfigSize, len(stdout), err)
		}
	})
	t.Run("unknown network", func(t *testing.T) {
		_, _, err := p.Exec(ctx, testCall("nope", 0, "/bin/noop", nil, nil))
		if !errors.Is(err, netplugin.ErrUnknownGeneration) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		errc := make(chan error, 16)
		for i := range 16 {
			go func() {
				in := strings.Repeat("y", i*1000)
				out, _, err := p.Exec(ctx, testCall("kte", 0, "/bin/echo", nil, []byte(in)))
				if err == nil && string(out) != in {
					err = errors.New("wrong output")
				}
				errc <- err
			}()
		}
		for range 16 {
			if err := <-errc; err != nil {
				t.Error(err)
			}
		}
	})
	_ = time.Second
}
