package pluginhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

var (
	// ErrUnavailable means the network's container is not running (starting,
	// failed or stopped); the call was not attempted.
	ErrUnavailable = errors.New("network unavailable")
	// ErrTimeout means the call exceeded the plugin timeout or the caller's
	// deadline; every process it started has been killed.
	ErrTimeout = errors.New("plugin timed out")
	// ErrPluginFailed means the plugin ran and exited non-zero or was
	// killed by a signal; the error is an *ExecError.
	ErrPluginFailed = errors.New("plugin failed")
	// ErrUnknownNetwork means no network of that name was started.
	ErrUnknownNetwork = errors.New("unknown network")
)

// ExecError describes a plugin call that ran and failed. Exec returns it
// wrapped in a *netconfig.NetworkError naming the network and the path.
type ExecError struct {
	// ExitCode is the process's exit status, or -1 when it was killed by a
	// signal (Signal then names it).
	ExitCode int
	Signal   string
	// CNIError is the CNI error object the plugin printed on stdout, if any.
	CNIError *types.Error
	// Stderr is an excerpt (the tail) of the plugin's stderr.
	Stderr string
}

// stderrExcerpt is how much of a failed plugin's stderr goes into an error.
const stderrExcerpt = 2048

// Error includes the exit status, the CNI message and details, and the
// stderr excerpt.
func (e *ExecError) Error() string {
	var b strings.Builder
	if e.Signal != "" {
		fmt.Fprintf(&b, "killed by signal %s", e.Signal)
	} else {
		fmt.Fprintf(&b, "exited with code %d", e.ExitCode)
	}
	if e.CNIError != nil {
		fmt.Fprintf(&b, ": CNI error %d: %s", e.CNIError.Code, e.CNIError.Msg)
		if e.CNIError.Details != "" {
			fmt.Fprintf(&b, " (%s)", e.CNIError.Details)
		}
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "; stderr: %s", s)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrPluginFailed) true for every *ExecError.
func (e *ExecError) Is(target error) bool { return target == ErrPluginFailed }

// Unwrap returns the CNI error object, if the plugin printed one: callers
// branch on its code with errors.As(err, &cniErr) (*types.Error), such as
// 11, "try again later".
func (e *ExecError) Unwrap() error {
	if e.CNIError == nil {
		return nil
	}
	return e.CNIError
}

// timeoutError is returned when a call exceeds its limit.
type timeoutError struct {
	limit time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("timed out after %s", e.limit)
}

func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

// unavailableError is returned for a call to a network that is not running.
type unavailableError struct {
	reason string
}

func (e *unavailableError) Error() string {
	return "unavailable: " + e.reason
}

func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// parseCNIError returns the CNI error object in out, or nil when out is not one.
func parseCNIError(out []byte) *types.Error {
	var probe struct {
		Code *uint   `json:"code"`
		Msg  *string `json:"msg"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || probe.Code == nil || probe.Msg == nil {
		return nil
	}
	var e types.Error
	if err := json.Unmarshal(out, &e); err != nil {
		return nil
	}
	return &e
}
