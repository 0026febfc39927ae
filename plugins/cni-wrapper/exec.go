package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// stderrTail is how much of a plugin's stderr is kept for error messages when
// the plugin printed no CNI error object.
const stderrTail = 4 << 10

// pluginExec runs CNI plugins for libcni. Unlike libcni's default executor it
// streams the plugin's stderr to ours as it is written (so logs of a plugin
// that hangs are not lost) and never lets plugin output reach our stdout.
type pluginExec struct {
	stderr io.Writer
	version.PluginDecoder
}

var _ invoke.Exec = (*pluginExec)(nil)

// ExecPlugin runs pluginPath with stdinData and environ and returns its
// stdout. A failed plugin's error is the *types.Error it printed, or one built
// from its stderr.
func (e *pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var stdout bytes.Buffer
	tail := &tailBuffer{max: stderrTail}
	var err error
	for range 5 {
		stdout.Reset()
		cmd := exec.CommandContext(ctx, pluginPath)
		cmd.Env = environ
		cmd.Stdin = bytes.NewReader(stdinData)
		cmd.Stdout = &stdout
		cmd.Stderr = io.MultiWriter(e.stderr, tail)
		// A plugin's own children (iptables, nft) may hold the pipes open
		// after it is killed; do not wait for them forever.
		cmd.WaitDelay = 2 * time.Second
		err = cmd.Run()
		// Same retry as libcni: the binary may be in the middle of being
		// replaced.
		if err == nil || !strings.Contains(err.Error(), "text file busy") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("plugin %s interrupted", pluginPath), ctx.Err().Error())
	}
	return nil, pluginError(err, stdout.Bytes(), tail.String())
}

// FindInPath finds plugin in paths.
func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// pluginError turns a failed plugin run into a *types.Error: the object the
// plugin printed on stdout when there is one, otherwise a message with the
// exit status and the end of its stderr.
func pluginError(runErr error, stdout []byte, stderr string) error {
	stderr = strings.TrimSpace(stderr)
	if len(bytes.TrimSpace(stdout)) > 0 {
		var perr types.Error
		if err := json.Unmarshal(stdout, &perr); err == nil && (perr.Msg != "" || perr.Code != 0) {
			return &perr
		}
		return types.NewError(types.ErrInternal,
			fmt.Sprintf("plugin failed (%v) and printed no CNI error object", runErr),
			fmt.Sprintf("stdout: %q; stderr: %q", truncate(string(stdout), 512), stderr))
	}
	var ee *exec.ExitError
	if !errors.As(runErr, &ee) {
		// Could not start it at all (permissions, bad ELF, ...).
		return types.NewError(types.ErrInternal, fmt.Sprintf("cannot run plugin: %v", runErr), "")
	}
	if stderr == "" {
		return types.NewError(types.ErrInternal, fmt.Sprintf("plugin failed with no error message (%v)", runErr), "")
	}
	return types.NewError(types.ErrInternal, fmt.Sprintf("plugin failed (%v)", runErr), stderr)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
