package netplugin

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

var (
	// ErrUnavailable means the generation's container is not running
	// (fetching, starting, failed or stopped), or its plugin says it cannot
	// serve adds; the call was not attempted. The error is an
	// *UnavailableError.
	ErrUnavailable = errors.New("network unavailable")
	// ErrTimeout means the call exceeded the plugin timeout or the caller's
	// deadline; every process it started has been killed. The error is a
	// *TimeoutError.
	ErrTimeout = errors.New("plugin timed out")
	// ErrPluginFailed means the plugin ran and exited non-zero or was
	// killed by a signal; the error is an *ExecError.
	ErrPluginFailed = errors.New("plugin failed")
	// ErrUnknownGeneration means the plugin host runs no generation of
	// that network and number.
	ErrUnknownGeneration = errors.New("unknown generation")
	// ErrUnknownNetwork means a network named in a request is not in the
	// config (nor, where the request may name one, held by a pod).
	ErrUnknownNetwork = errors.New("unknown network")
)

// NetworkError is a failure of one network at one operation, in the style
// of os.PathError: `network "mynet": /opt/network/add: <Err>`. Callers
// branch on it with errors.As and on its cause with errors.Is; nothing
// needs to read the message.
type NetworkError struct {
	Network string
	// Op is what failed: a plugin path ("/opt/network/add"), "interface
	// name", "plugin config", ...; empty when the network as a whole is
	// at fault (for example it is not running).
	Op  string
	Err error
}

func (e *NetworkError) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("network %q: %v", e.Network, e.Err)
	}
	return fmt.Sprintf("network %q: %s: %v", e.Network, e.Op, e.Err)
}

func (e *NetworkError) Unwrap() error { return e.Err }

// WrapNetworkError returns err as a *NetworkError of network at op. An error
// that already is a *NetworkError of the same network is returned as it is,
// so layers can each name the network without saying it twice. nil stays nil.
func WrapNetworkError(network, op string, err error) error {
	if err == nil {
		return nil
	}
	var ne *NetworkError
	if errors.As(err, &ne) && ne.Network == network {
		return err
	}
	return &NetworkError{Network: network, Op: op, Err: err}
}

// ExecError describes a plugin call that ran and failed. The plugin host
// returns it wrapped in a *NetworkError naming the network and the path.
type ExecError struct {
	// ExitCode is the process's exit status, or -1 when it was killed by a
	// signal (Signal then names it).
	ExitCode int
	Signal   string
	// CNIError is the CNI error object the plugin printed on stdout, if any.
	CNIError *types.Error
	// Stdout is an excerpt (the head) of the plugin's stdout when it is
	// not a CNI error object: a plugin that prints its reason as plain
	// text (the Kurma spec's contract: stdout and stderr give the
	// message).
	Stdout string
	// Stderr is an excerpt (the tail) of the plugin's stderr.
	Stderr string
}

// Error includes the exit status, the CNI message and details (or the
// stdout excerpt), and the stderr excerpt.
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
	if s := strings.TrimSpace(e.Stdout); s != "" && e.CNIError == nil {
		fmt.Fprintf(&b, "; stdout: %s", s)
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

// TimeoutError is a call that exceeded its limit (errors.Is ErrTimeout).
type TimeoutError struct {
	Limit time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("timed out after %s", e.Limit)
}

// Is makes errors.Is(err, ErrTimeout) true for every *TimeoutError.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// UnavailableError is a call to a generation that cannot take it
// (errors.Is ErrUnavailable); Reason says why: its state, the reason of its
// last failure, or its plugin's status message.
type UnavailableError struct {
	Reason string
}

func (e *UnavailableError) Error() string {
	return "unavailable: " + e.Reason
}

// Is makes errors.Is(err, ErrUnavailable) true for every *UnavailableError.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }
