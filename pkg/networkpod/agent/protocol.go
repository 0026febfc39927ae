// Package agent is kurma's exec agent: a small server started once inside
// every network container that runs plugin calls (add, del, ...) there on
// request, and the wire protocol between it and kurmad.
//
// One call per unix-socket connection: the client writes one JSON Request,
// the agent answers with one JSON Response and closes. Closing the
// connection before the answer cancels the call: the agent kills every
// process it started.
package agent

import "time"

// Request is one plugin call.
type Request struct {
	Path  string   `json:"path"`
	Args  []string `json:"args,omitempty"`
	Stdin []byte   `json:"stdin,omitempty"`
	// Timeout is the call's limit; on expiry the agent kills the call's
	// whole process tree and answers TimedOut.
	Timeout time.Duration `json:"timeout"`
	// MaxOutput caps stdout and stderr each; 0 → DefaultMaxOutput.
	MaxOutput int `json:"maxOutput,omitempty"`
}

// Response is the outcome of one call.
type Response struct {
	// Error is set when the call could not be started (no such file, ...).
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exitCode"`
	// Signal names the signal that killed the process, if one did.
	Signal          string        `json:"signal,omitempty"`
	TimedOut        bool          `json:"timedOut,omitempty"`
	Stdout          []byte        `json:"stdout,omitempty"`
	Stderr          []byte        `json:"stderr,omitempty"`
	StdoutTruncated bool          `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool          `json:"stderrTruncated,omitempty"`
	Duration        time.Duration `json:"duration"`
	// InProcess is set when the agent ran the image's cni-wrapper code
	// itself rather than starting /opt/network/<verb> (see Server.CNIWrapper).
	InProcess bool `json:"inProcess,omitempty"`
}

// DefaultMaxOutput is the cap on stdout and on stderr of one call.
const DefaultMaxOutput = 1 << 20
