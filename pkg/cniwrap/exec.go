package cniwrap

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
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// StderrTail is how much of a plugin's stderr is kept for error messages when
// the plugin printed no CNI error object.
const StderrTail = 4 << 10

// PluginExec runs CNI plugins for libcni with os/exec. Unlike libcni's default executor it
// streams the plugin's stderr to ours as it is written (so logs of a plugin
// that hangs are not lost) and never lets plugin output reach our stdout.
type PluginExec struct {
	Stderr io.Writer
	version.PluginDecoder
}

var _ invoke.Exec = (*PluginExec)(nil)

// ExecPlugin runs pluginPath with stdinData and environ and returns its
// stdout. A failed plugin's error is the *types.Error it printed, or one built
// from its stderr.
func (e *PluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var stdout bytes.Buffer
	tail := NewTailBuffer(StderrTail)
	var err error
	for range 5 {
		stdout.Reset()
		cmd := exec.CommandContext(ctx, pluginPath)
		cmd.Env = environ
		cmd.Stdin = bytes.NewReader(stdinData)
		cmd.Stdout = &stdout
		cmd.Stderr = io.MultiWriter(e.Stderr, tail)
		// A plugin's own children (iptables, nft) may hold the pipes open
		// after it is killed; do not wait for them forever.
		cmd.WaitDelay = 2 * time.Second
		err = cmd.Run()
		// Same retry as libcni: the binary may be in the middle of being
		// replaced.
		if err == nil || !errors.Is(err, syscall.ETXTBSY) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, Interrupted(pluginPath, ctx.Err())
	}
	var ee *exec.ExitError
	return nil, PluginFailure(err, errors.As(err, &ee), stdout.Bytes(), tail.String())
}

// Interrupted is the error of a plugin run cut short by ctx.
func Interrupted(pluginPath string, ctxErr error) error {
	return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("plugin %s interrupted", pluginPath), ctxErr.Error())
}

// FindInPath finds plugin in paths.
func (e *PluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return FindPlugin(plugin, paths)
}

// PluginNotFoundError is FindPlugin's failure: the network config names a
// plugin type the image does not have, a config error (CNI code 7) rather
// than an internal one.
type PluginNotFoundError struct{ Err error }

func (e *PluginNotFoundError) Error() string { return e.Err.Error() }
func (e *PluginNotFoundError) Unwrap() error { return e.Err }

// FindPlugin is libcni's FindInPath with its failure typed: every
// invoke.Exec kurma hands libcni finds plugins with it.
func FindPlugin(plugin string, paths []string) (string, error) {
	path, err := invoke.FindInPath(plugin, paths)
	if err != nil {
		return "", &PluginNotFoundError{Err: err}
	}
	return path, nil
}

// PluginFailure turns a failed plugin run into a *types.Error: the object the
// plugin printed on stdout when there is one, otherwise a message with the
// exit status and the end of its stderr. runErr says how it ended ("exit
// status 1", "signal: killed") or why it could not start; ran is false for
// the latter.
func PluginFailure(runErr error, ran bool, stdout []byte, stderr string) error {
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
	if !ran {
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

// TailBuffer keeps the last max bytes written to it.
type TailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// NewTailBuffer returns a TailBuffer keeping max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
