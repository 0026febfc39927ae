// Package agent is kurma's exec agent: a small server started once inside
// every plugin container that runs plugin calls (add, del, ...) there on
// request, and the wire protocol between it and kurmad.
//
// kurmad keeps one connection per container and runs every call over it,
// concurrently: each message is a length-prefixed binary frame (ReadFrame)
// that names its call by an id the client picks. The client sends a call
// (AppendCall: the Request, with the call's view alongside the frame's
// first bytes, SCM_RIGHTS), releases it when it was sent held
// (AppendRelease) and may cancel it (AppendCancel); the agent
// answers each call once (AppendAnswer: the Response) and kills a
// cancelled call's processes before it answers. Closing the connection
// cancels every call on it. A connection closed with nothing written is a
// liveness probe: no answer. A call that cannot be read is answered with a
// Response whose Error says why (starting with "bad request"); a frame
// that cannot be read ends the connection.
//
// Both sides bound what they read: a call frame at most MaxRequestSize
// bytes, an answer at most AnswerLimit(maxOutput). Bytes past the fields a
// reader knows are ignored, so a field a newer kurmad appends reaches an
// older agent harmlessly.
package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Request is one plugin call.
type Request struct {
	Path  string
	Args  []string
	Stdin []byte
	// Timeout is the call's limit; on expiry the agent kills the call's
	// whole process tree and answers TimedOut.
	Timeout time.Duration
	// MaxOutput caps stdout and stderr each; 0 → DefaultMaxOutput.
	MaxOutput int
	// View says a mount namespace came with the request (SCM_RIGHTS,
	// with its frame's first bytes): every process of the call starts in
	// it (view.go).
	View bool
	// Held says the call's processes may start, but none is given a byte
	// of its stdin until the client releases the call (FrameRelease): a
	// plugin reads its config first, so nothing the config asks for is
	// done before then, while the processes' start overlaps what the
	// client does meanwhile (kurmad: making the call's intent durable).
	// A call cancelled before its release never gets its stdin.
	Held bool
}

// Response is the outcome of one call.
type Response struct {
	// Error is set when the call could not be started (no such file, ...).
	Error    string
	ExitCode int
	// Signal names the signal that killed the process, if one did.
	Signal          string
	TimedOut        bool
	Stdout          []byte
	Stderr          []byte
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
	// InProcess is set when the agent ran the image's cni-wrapper code
	// itself rather than starting /opt/network/<verb> (see Server.CNIWrapper).
	InProcess bool
	// LimitsHit names the call's limits its processes reached ("memory":
	// the OOM killer ended one; "pids": a fork failed): calllimits.go.
	LimitsHit []string
}

// DefaultMaxOutput is the cap on stdout and on stderr of one call.
const DefaultMaxOutput = 1 << 20

// MaxOutputLimit is the largest MaxOutput a request may ask for.
const MaxOutputLimit = 64 << 20

// MaxRequestSize bounds a call frame as read by the agent: a plugin config
// (at most netplugin.MaxConfigSize, which the config checks at load) and
// its arguments, with room to spare.
const MaxRequestSize = 8 << 20

// Frame kinds.
const (
	FrameCall    byte = 1 // client → agent: a Request
	FrameCancel  byte = 2 // client → agent: kill the call, which answers
	FrameAnswer  byte = 3 // agent → client: a call's Response
	FrameRelease byte = 4 // client → agent: a held call's processes get their stdin
)

// frameHeader is a frame's length (of what follows it: kind, id, body),
// kind and call id.
const frameHeader = 4 + 1 + 8

var (
	// ErrBadRequest is a request that is not one: cut short, or a field
	// out of range. The agent answers it with Response.Error.
	ErrBadRequest = errors.New("bad request")
	// ErrTooLarge is a message larger than its reader's bound; the rest
	// of it is left unread.
	ErrTooLarge = errors.New("message too large")
)

// AppendCall appends call id's frame for req to buf.
func AppendCall(buf []byte, id uint64, req *Request) []byte {
	buf, start := beginFrame(buf, FrameCall, id)
	var flags byte
	if req.View {
		flags |= 1
	}
	if req.Held {
		flags |= 2
	}
	buf = append(buf, flags)
	buf = binary.AppendVarint(buf, int64(req.Timeout))
	buf = binary.AppendUvarint(buf, uint64(max(req.MaxOutput, 0)))
	buf = appendBytes(buf, []byte(req.Path))
	buf = binary.AppendUvarint(buf, uint64(len(req.Args)))
	for _, a := range req.Args {
		buf = appendBytes(buf, []byte(a))
	}
	buf = appendBytes(buf, req.Stdin)
	return endFrame(buf, start)
}

// AppendCancel appends the frame that cancels call id to buf.
func AppendCancel(buf []byte, id uint64) []byte {
	buf, start := beginFrame(buf, FrameCancel, id)
	return endFrame(buf, start)
}

// AppendRelease appends the frame that releases held call id to buf.
func AppendRelease(buf []byte, id uint64) []byte {
	buf, start := beginFrame(buf, FrameRelease, id)
	return endFrame(buf, start)
}

// AppendAnswer appends the frame answering call id with resp to buf.
func AppendAnswer(buf []byte, id uint64, resp *Response) []byte {
	buf, start := beginFrame(buf, FrameAnswer, id)
	var flags byte
	for i, b := range []bool{resp.TimedOut, resp.StdoutTruncated, resp.StderrTruncated, resp.InProcess} {
		if b {
			flags |= 1 << i
		}
	}
	buf = append(buf, flags)
	buf = binary.AppendVarint(buf, int64(resp.ExitCode))
	buf = binary.AppendVarint(buf, int64(resp.Duration))
	buf = appendBytes(buf, []byte(resp.Error))
	buf = appendBytes(buf, []byte(resp.Signal))
	buf = binary.AppendUvarint(buf, uint64(len(resp.LimitsHit)))
	for _, l := range resp.LimitsHit {
		buf = appendBytes(buf, []byte(l))
	}
	buf = appendBytes(buf, resp.Stdout)
	buf = appendBytes(buf, resp.Stderr)
	return endFrame(buf, start)
}

func beginFrame(buf []byte, kind byte, id uint64) ([]byte, int) {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, kind)
	return binary.BigEndian.AppendUint64(buf, id), start
}

func endFrame(buf []byte, start int) []byte {
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
	return buf
}

func appendBytes(buf, b []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	return append(buf, b...)
}

// Header is a frame's header, as ReadHeader reads it.
type Header struct {
	Kind byte
	ID   uint64
	// Len is the length of the body that follows.
	Len int
}

// ReadHeader reads a frame's header from r. It returns io.EOF when r ends
// before any byte, io.ErrUnexpectedEOF when it ends within the header.
func ReadHeader(r io.Reader) (Header, error) {
	var b [frameHeader]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return Header{}, err
	}
	n := binary.BigEndian.Uint32(b[:4])
	if n < frameHeader-4 {
		return Header{}, fmt.Errorf("%w: a frame of %d bytes, shorter than its header", ErrBadRequest, n)
	}
	return Header{Kind: b[4], ID: binary.BigEndian.Uint64(b[5:]), Len: int(n) - (frameHeader - 4)}, nil
}

// ReadBody reads h's body from r, refusing (ErrTooLarge, nothing read)
// one longer than limit.
func ReadBody(r io.Reader, h Header, limit int64) ([]byte, error) {
	if int64(h.Len) > limit {
		return nil, fmt.Errorf("a frame of %d bytes, over the bound of %d: %w", h.Len, limit, ErrTooLarge)
	}
	body := make([]byte, h.Len)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// DecodeRequest decodes a call frame's body. Its error wraps
// ErrBadRequest: a body cut short, or a field out of range.
func DecodeRequest(body []byte) (*Request, error) {
	d := decoder{b: body}
	req := &Request{}
	flags := d.byte()
	req.View = flags&1 != 0
	req.Held = flags&2 != 0
	req.Timeout = time.Duration(d.varint())
	req.MaxOutput = int(min(d.uvarint(), MaxOutputLimit+1))
	req.Path = string(d.bytes())
	if n := d.uvarint(); n <= uint64(len(body)) {
		for range n {
			req.Args = append(req.Args, string(d.bytes()))
		}
	} else {
		d.err = io.ErrUnexpectedEOF
	}
	req.Stdin = d.bytes()
	if d.err != nil {
		return nil, fmt.Errorf("%w: request cut short", ErrBadRequest)
	}
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return req, nil
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

// AnswerLimit bounds an answer's body to a request with the given
// MaxOutput (0: DefaultMaxOutput): both outputs at their cap plus room for
// the other fields. Whatever answers on the agent's socket, kurmad never
// reads more.
func AnswerLimit(maxOutput int) int64 {
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	return int64(2*maxOutput + 64<<10)
}

// DecodeResponse decodes an answer frame's body to a request with the
// given MaxOutput (0: DefaultMaxOutput). An answer cut short is
// io.ErrUnexpectedEOF; one with an output longer than maxOutput (the
// agent caps them) wraps ErrTooLarge.
func DecodeResponse(body []byte, maxOutput int) (*Response, error) {
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	d := decoder{b: body}
	resp := &Response{}
	flags := d.byte()
	resp.TimedOut, resp.StdoutTruncated, resp.StderrTruncated, resp.InProcess =
		flags&1 != 0, flags&2 != 0, flags&4 != 0, flags&8 != 0
	resp.ExitCode = int(d.varint())
	resp.Duration = time.Duration(d.varint())
	resp.Error = string(d.bytes())
	resp.Signal = string(d.bytes())
	if n := d.uvarint(); n <= uint64(len(body)) {
		for range n {
			resp.LimitsHit = append(resp.LimitsHit, string(d.bytes()))
		}
	} else {
		d.err = io.ErrUnexpectedEOF
	}
	resp.Stdout = d.bytes()
	resp.Stderr = d.bytes()
	if d.err != nil {
		return nil, fmt.Errorf("answer cut short: %w", io.ErrUnexpectedEOF)
	}
	if len(resp.Stdout) > maxOutput || len(resp.Stderr) > maxOutput {
		return nil, fmt.Errorf("answer with %d bytes of stdout and %d of stderr, over the cap of %d: %w",
			len(resp.Stdout), len(resp.Stderr), maxOutput, ErrTooLarge)
	}
	return resp, nil
}

// decoder reads a frame body's fields; the first field that does not fit
// sets err, and every later one reads as zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed field; the slice shares the body's array.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = io.ErrUnexpectedEOF
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return b
}
