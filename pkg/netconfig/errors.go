package netconfig

import (
	"errors"
	"fmt"
	"strings"
)

// Problem is one thing wrong with a config file.
type Problem struct {
	// Path locates the value in the document, e.g. "pod_networks[2].name".
	// It is empty for problems with the document as a whole (JSON syntax).
	Path string
	// Msg says what is wrong and how to fix it.
	Msg string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Msg
	}
	return p.Path + ": " + p.Msg
}

// ValidationError lists every problem found in a config, so an operator can
// fix them all in one edit instead of one per daemon restart.
type ValidationError struct {
	Problems []Problem
}

// Error returns one line per problem.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// ErrInterfaceConflict is returned (wrapped) by InterfaceNamer.Name when a
// rendered interface name is already used in the pod and re-rendering cannot
// help.
var ErrInterfaceConflict = errors.New("interface name already used in the pod")

// problems collects Problems while a document is walked.
type problems struct {
	list []Problem
}

func (ps *problems) add(path, msg string) {
	ps.list = append(ps.list, Problem{Path: path, Msg: msg})
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return &ValidationError{Problems: ps.list}
}

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
