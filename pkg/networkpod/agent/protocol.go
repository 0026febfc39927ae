// Package agent is kurma's exec agent: a small server started once inside
// every plugin container that runs plugin calls (add, del, ...) there on
// request, and the wire protocol between it and kurmad.
//
// One call per unix-socket connection: the client writes one JSON Request
// (WriteRequest) and keeps the connection open; the agent reads it
// (ReadRequest) and answers with one JSON Response (WriteResponse, read
// with ReadResponse) and closes. Closing the connection (or half-closing
// it) before the answer cancels the call: the agent kills every process it
// started, then answers. A connection closed with nothing written is a
// liveness probe: no answer. A request that cannot be read is answered
// with a Response whose Error says why (starting with "bad request").
//
// Both sides bound what they read: a request at most MaxRequestSize bytes,
// an answer at most AnswerLimit(maxOutput). Unknown fields are ignored, so
// an optional field a newer kurmad adds reaches an older agent harmlessly.
package agent

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

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
	// View says a mount namespace came with the request (SCM_RIGHTS,
	// with its first bytes): every process of the call starts in it
	// (view.go).
	View bool `json:"view,omitempty"`
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
	// LimitsHit names the call's limits its processes reached ("memory":
	// the OOM killer ended one; "pids": a fork failed): calllimits.go.
	LimitsHit []string `json:"limitsHit,omitempty"`
}

// DefaultMaxOutput is the cap on stdout and on stderr of one call.
const DefaultMaxOutput = 1 << 20

// MaxOutputLimit is the largest MaxOutput a request may ask for.
const MaxOutputLimit = 64 << 20

// MaxRequestSize bounds a request as read by the agent: a plugin config (at
// most netplugin.MaxConfigSize, which the config checks at load) and its
// arguments, base64 in JSON, with room to spare.
const MaxRequestSize = 8 << 20

var (
	// ErrBadRequest is a request that is not one: not JSON, or a field
	// out of range. The agent answers it with Response.Error.
	ErrBadRequest = errors.New("bad request")
	// ErrTooLarge is a message larger than its reader's bound; the rest
	// of it is left unread.
	ErrTooLarge = errors.New("message too large")
)

// WriteRequest writes req to w as the client's one message.
func WriteRequest(w io.Writer, req *Request) error {
	return json.NewEncoder(w).Encode(req)
}

// ReadRequest reads one request of at most MaxRequestSize bytes from r.
// It returns io.EOF when r ends before any byte (a liveness probe), an
// error wrapping ErrTooLarge when the request is larger, and one wrapping
// ErrBadRequest when it is not a valid request (a request cut short is
// one). rest reads what follows the request on r (buffered bytes, then r):
// the agent reads it to see the client close.
func ReadRequest(r io.Reader) (req *Request, rest io.Reader, err error) {
	dec := json.NewDecoder(&boundedReader{r: r, n: MaxRequestSize})
	req = &Request{}
	err = dec.Decode(req)
	// Read through the bound so far, buffered; r itself holds the rest.
	rest = io.MultiReader(dec.Buffered(), r)
	switch {
	case errors.Is(err, io.EOF):
		return nil, rest, io.EOF
	case errors.Is(err, ErrTooLarge):
		return nil, rest, fmt.Errorf("request larger than %d bytes: %w", MaxRequestSize, ErrTooLarge)
	case err != nil:
		return nil, rest, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := req.validate(); err != nil {
		return nil, rest, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return req, rest, nil
}

// validate checks the fields a call cannot run without.
func (req *Request) validate() error {
	switch {
	case req.Path == "":
		return errors.New(`no "path"`)
	case req.Timeout <= 0:
		return fmt.Errorf(`"timeout" %v: must be positive`, req.Timeout)
	case req.MaxOutput < 0 || req.MaxOutput > MaxOutputLimit:
		return fmt.Errorf(`"maxOutput" %d: must be 0 (the default) to %d`, req.MaxOutput, MaxOutputLimit)
	}
	return nil
}

// WriteResponse writes resp to w as the agent's one answer.
func WriteResponse(w io.Writer, resp *Response) error {
	return json.NewEncoder(w).Encode(resp)
}

// AnswerLimit bounds an answer to a request with the given MaxOutput (0:
// DefaultMaxOutput): both outputs at their cap, base64 in JSON, plus room
// for the other fields. Whatever answers on the agent's socket, kurmad
// never reads more.
func AnswerLimit(maxOutput int) int64 {
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	return int64(2*base64.StdEncoding.EncodedLen(maxOutput) + 64<<10)
}

// ReadResponse reads the answer to a request with the given MaxOutput (0:
// DefaultMaxOutput). It returns io.EOF when r ends before any byte (the
// agent closed without answering), io.ErrUnexpectedEOF when r ends
// mid-answer, an error wrapping ErrTooLarge past AnswerLimit(maxOutput)
// bytes (the rest left unread) or when an output is longer than maxOutput
// (the agent caps them), and JSON's error for anything else that is not an
// answer.
func ReadResponse(r io.Reader, maxOutput int) (*Response, error) {
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	limit := AnswerLimit(maxOutput)
	var resp Response
	if err := json.NewDecoder(&boundedReader{r: r, n: limit}).Decode(&resp); err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, fmt.Errorf("answer larger than %d bytes: %w", limit, ErrTooLarge)
		}
		return nil, err
	}
	if len(resp.Stdout) > maxOutput || len(resp.Stderr) > maxOutput {
		return nil, fmt.Errorf("answer with %d bytes of stdout and %d of stderr, over the cap of %d: %w",
			len(resp.Stdout), len(resp.Stderr), maxOutput, ErrTooLarge)
	}
	return &resp, nil
}

// boundedReader reads at most n bytes of r, then fails with ErrTooLarge
// (io.LimitReader's EOF would read as a message cut short).
type boundedReader struct {
	r io.Reader
	n int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	return n, err
}
