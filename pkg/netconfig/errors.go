package netconfig

import (
	"errors"
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
