package agent

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The wire protocol alone: what kurmad writes and reads, what the agent
// reads and answers, over bytes and over a connection, without a plugin
// call (networkpod's tests run real calls through real agents).

// readFrame reads one whole frame of r, its body bounded by limit.
func readFrame(r io.Reader, limit int64) (Header, []byte, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return h, nil, err
	}
	body, err := ReadBody(r, h, limit)
	return h, body, err
}

func TestRequestRoundTrip(t *testing.T) {
	for i, req := range []*Request{
		{Path: "/opt/network/add", Timeout: time.Minute},
		{Path: "/opt/network/add", Args: []string{"/run/kurma/netns/p", "p", ""}, Stdin: []byte(`{"cniVersion":"1.1.0"}`),
			Timeout: 1500 * time.Millisecond, MaxOutput: 4096, View: true},
		{Path: "/opt/network/add", Stdin: []byte(`{}`), Timeout: time.Minute, View: true, Held: true},
		// Any bytes on stdin, any argument (spaces, empty, non-ASCII).
		{Path: "status", Args: []string{"a b", "", "é\x00"}, Stdin: []byte{0, 0xff, '\n', '"'}, Timeout: time.Nanosecond, MaxOutput: MaxOutputLimit},
	} {
		buf := AppendCall(nil, uint64(i+7), req)
		r := bytes.NewReader(buf)
		h, body, err := readFrame(r, MaxRequestSize)
		if err != nil || h.Kind != FrameCall || h.ID != uint64(i+7) || r.Len() != 0 {
			t.Fatalf("frame %+v, %v (%d bytes left); want call %d, whole", h, err, r.Len(), i+7)
		}
		got, err := DecodeRequest(body)
		if err != nil {
			t.Fatalf("DecodeRequest(%q) = %v", body, err)
		}
		if !reflect.DeepEqual(got, req) {
			t.Errorf("round trip of %+v = %+v", req, got)
		}
	}
}

// Every kind of answer: a normal exit with output, a failure, a signal, a
// timeout, a call that could not start, truncated outputs, an in-process
// call, limits hit.
func TestResponseRoundTrip(t *testing.T) {
	for name, resp := range map[string]*Response{
		"exit 0":      {ExitCode: 0, Stdout: []byte(`{"cniVersion":"1.1.0"}`), Duration: 12 * time.Millisecond},
		"exit 1":      {ExitCode: 1, Stdout: []byte(`{"code":100}`), Stderr: []byte("told to fail\n"), Duration: time.Millisecond},
		"signal":      {ExitCode: -1, Signal: "SIGSEGV", Stderr: []byte{0xff, 0}},
		"timed out":   {ExitCode: -1, Signal: "SIGKILL", TimedOut: true, Duration: 2 * time.Second},
		"no start":    {Error: `exec /opt/network/gc: no such file or directory`},
		"truncated":   {Stdout: bytes.Repeat([]byte("o"), 100), StdoutTruncated: true, Stderr: bytes.Repeat([]byte("e"), 100), StderrTruncated: true},
		"in-process":  {InProcess: true, Stdout: []byte("{}")},
		"limits":      {ExitCode: -1, Signal: "SIGKILL", LimitsHit: []string{"memory", "pids"}},
		"empty":       {},
		"bad request": {Error: "bad request: no \"path\""},
	} {
		t.Run(name, func(t *testing.T) {
			h, body, err := readFrame(bytes.NewReader(AppendAnswer(nil, 3, resp)), AnswerLimit(100))
			if err != nil || h.Kind != FrameAnswer || h.ID != 3 {
				t.Fatalf("frame %+v, %v; want the answer to call 3", h, err)
			}
			got, err := DecodeResponse(body, 100)
			if err != nil {
				t.Fatalf("DecodeResponse(%q) = %v", body, err)
			}
			if !reflect.DeepEqual(got, resp) {
				t.Errorf("round trip = %+v, want %+v", got, resp)
			}
		})
	}
}

// Each malformed request is refused with the error a caller branches on,
// and none reads past its bound.
func TestRequestMalformed(t *testing.T) {
	body := func(req *Request) []byte { return AppendCall(nil, 1, req)[frameHeader:] }
	good := body(&Request{Path: "/x", Args: []string{"a"}, Stdin: []byte("in"), Timeout: 1})
	tests := []struct {
		name    string
		body    []byte
		mention string
	}{
		{"empty", nil, "cut short"},
		{"cut short", good[:len(good)-1], "cut short"},
		{"no path", body(&Request{Timeout: 1000}), `no "path"`},
		{"no timeout", body(&Request{Path: "/x"}), `"timeout" 0s`},
		{"negative timeout", body(&Request{Path: "/x", Timeout: -5}), `"timeout" -5ns`},
		{"maxOutput over the limit", body(&Request{Path: "/x", Timeout: 1, MaxOutput: MaxOutputLimit + 1}), `"maxOutput" 67108865`},
		{"more arguments than bytes", append([]byte{0, 2, 0, 2, '/', 'x'}, 0xff, 0xff, 0xff, 0x0f), "cut short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := DecodeRequest(tt.body)
			if !errors.Is(err, ErrBadRequest) || req != nil {
				t.Fatalf("DecodeRequest = %+v, %v; want ErrBadRequest", req, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not say %q", err, tt.mention)
			}
		})
	}
	// Bytes past the fields (a newer kurmad's) are ignored.
	if req, err := DecodeRequest(append(good, "newer field"...)); err != nil || req.Path != "/x" || string(req.Stdin) != "in" {
		t.Errorf("DecodeRequest with a field appended = %+v, %v", req, err)
	}
	// A frame over the bound is refused before its body is read.
	huge := AppendCall(nil, 1, &Request{Path: "/x", Timeout: 1, Stdin: bytes.Repeat([]byte("A"), MaxRequestSize)})
	src := &countingReader{r: bytes.NewReader(huge)}
	if _, _, err := readFrame(src, MaxRequestSize); !errors.Is(err, ErrTooLarge) || src.n > frameHeader {
		t.Errorf("a frame over the bound: %v after %d bytes; want ErrTooLarge after the header", err, src.n)
	}
	if _, err := ReadHeader(strings.NewReader("")); err != io.EOF {
		t.Errorf("ReadHeader of nothing (a probe) = %v, want io.EOF", err)
	}
	if _, err := ReadHeader(strings.NewReader("\x00\x00")); err != io.ErrUnexpectedEOF {
		t.Errorf("ReadHeader of a header cut short = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, _, err := readFrame(bytes.NewReader(good[:len(good)-3]), MaxRequestSize); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a frame cut short = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestResponseMalformed(t *testing.T) {
	const maxOutput = 16
	body := func(resp *Response) []byte { return AppendAnswer(nil, 1, resp)[frameHeader:] }
	full := body(&Response{Stdout: []byte("out")})
	for _, tt := range []struct {
		name string
		body []byte
		want error
	}{
		{"cut short", full[:len(full)-2], io.ErrUnexpectedEOF},
		{"stdout over the cap", body(&Response{Stdout: bytes.Repeat([]byte("x"), maxOutput+1)}), ErrTooLarge},
		{"stderr over the cap", body(&Response{Stderr: bytes.Repeat([]byte("x"), maxOutput+1)}), ErrTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := DecodeResponse(tt.body, maxOutput)
			if !errors.Is(err, tt.want) || resp != nil {
				t.Fatalf("DecodeResponse = %+v, %v; want %v", resp, err, tt.want)
			}
		})
	}
	over := AppendAnswer(nil, 1, &Response{Error: strings.Repeat("x", int(AnswerLimit(maxOutput)))})
	src := &countingReader{r: bytes.NewReader(over)}
	if _, _, err := readFrame(src, AnswerLimit(maxOutput)); !errors.Is(err, ErrTooLarge) || int64(src.n) > AnswerLimit(maxOutput) {
		t.Errorf("an answer past the limit: %v after %d bytes; want ErrTooLarge within the limit", err, src.n)
	}
}

// AnswerLimit holds a response with both outputs at the cap.
func TestAnswerLimitHoldsFullOutputs(t *testing.T) {
	for _, max := range []int{1, 1000, DefaultMaxOutput} {
		full := &Response{Error: strings.Repeat("e", 4096), Signal: "SIGKILL", ExitCode: -1, TimedOut: true, InProcess: true,
			Stdout: bytes.Repeat([]byte{0xff}, max), Stderr: bytes.Repeat([]byte{0xfe}, max), StdoutTruncated: true, StderrTruncated: true,
			Duration: time.Hour, LimitsHit: []string{"memory", "pids"}}
		_, body, err := readFrame(bytes.NewReader(AppendAnswer(nil, 1, full)), AnswerLimit(max))
		if err != nil {
			t.Fatalf("maxOutput %d: %v", max, err)
		}
		if _, err := DecodeResponse(body, max); err != nil {
			t.Errorf("maxOutput %d: %v", max, err)
		}
	}
	if AnswerLimit(0) != AnswerLimit(DefaultMaxOutput) {
		t.Error("AnswerLimit(0) is not the default's")
	}
}

// The agent's side of a connection, before any call runs: a probe gets no
// answer; a malformed request gets an answer saying why and the connection
// stays for the next; a frame that cannot be read gets an answer and the
// connection is closed.
func TestServerAnswersBadRequests(t *testing.T) {
	var logged []string
	s := &Server{Log: func(format string, args ...any) { logged = append(logged, format) }}
	call := func(req *Request) []byte { return AppendCall(nil, 5, req) }
	for _, tt := range []struct {
		name   string
		in     []byte
		answer string // in Response.Error; "" → no answer at all
		closes bool   // the agent closes the connection after its answer
	}{
		{"probe", nil, "", true},
		{"no timeout", call(&Request{Path: "/opt/network/add"}), `bad request: "timeout" 0s: must be positive`, false},
		{"cut short", call(&Request{Path: "/x", Timeout: 1})[:frameHeader+3], "unexpected EOF", true},
		{"too large", append([]byte{0x7f, 0xff, 0xff, 0xff, FrameCall}, make([]byte, 8)...), "over the bound", true},
		{"unknown kind", append([]byte{0, 0, 0, 9, 42}, make([]byte, 8)...), "unknown kind 42", true},
		{"view without its descriptor", call(&Request{Path: "/bin/true", Timeout: time.Second, View: true}), "no descriptor came with it", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logged = nil
			client, agentSide := socketPair(t)
			defer client.Close()
			done := make(chan struct{})
			go func() { defer close(done); s.handle(agentSide) }()
			if _, err := client.Write(tt.in); err != nil {
				t.Fatal(err)
			}
			if tt.closes {
				// A probe's close, or the end of a frame cut short.
				client.(*net.UnixConn).CloseWrite()
			}
			if tt.answer == "" {
				<-done
				if len(logged) != 0 {
					t.Errorf("logged %v", logged)
				}
				if n, err := client.Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("read %d, %v; want no answer", n, err)
				}
				return
			}
			r := bufio.NewReader(client)
			h, body, err := readFrame(r, AnswerLimit(0))
			if err != nil {
				t.Fatalf("answer: %v", err)
			}
			resp, err := DecodeResponse(body, 0)
			if err != nil || h.Kind != FrameAnswer {
				t.Fatalf("answer %+v: %v", h, err)
			}
			if !strings.Contains(resp.Error, tt.answer) || resp.ExitCode != 0 || len(resp.Stdout) != 0 {
				t.Errorf("answer %+v, want Error saying %q", resp, tt.answer)
			}
			if len(logged) != 1 {
				t.Errorf("logged %v, want one line", logged)
			}
			if !tt.closes {
				// Still served: a probe-like close now ends it quietly.
				client.(*net.UnixConn).CloseWrite()
			}
			// The agent closed its side (with the rest of a frame too
			// large unread, the kernel resets the connection).
			if n, err := r.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, unix.ECONNRESET) {
				t.Errorf("after the answer: read %d, %v; want EOF", n, err)
			}
			<-done
		})
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// socketPair is a connected unix socket pair as the agent gets its
// connections (a non-blocking *os.File) and as kurmad dials them.
func socketPair(t *testing.T) (net.Conn, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	cf := os.NewFile(uintptr(fds[1]), "client")
	defer cf.Close()
	client, err := net.FileConn(cf)
	if err != nil {
		t.Fatal(err)
	}
	return client, os.NewFile(uintptr(fds[0]), "agent")
}
