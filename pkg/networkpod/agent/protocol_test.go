package agent

import (
	"bytes"
	"encoding/json"
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

func TestRequestRoundTrip(t *testing.T) {
	for _, req := range []*Request{
		{Path: "/opt/network/add", Timeout: time.Minute},
		{Path: "/opt/network/add", Args: []string{"/run/kurma/netns/p", "p", ""}, Stdin: []byte(`{"cniVersion":"1.1.0"}`),
			Timeout: 1500 * time.Millisecond, MaxOutput: 4096},
		// Any bytes on stdin, any argument (spaces, empty, non-ASCII).
		{Path: "status", Args: []string{"a b", "", "é\x00"}, Stdin: []byte{0, 0xff, '\n', '"'}, Timeout: time.Nanosecond, MaxOutput: MaxOutputLimit},
	} {
		var buf bytes.Buffer
		if err := WriteRequest(&buf, req); err != nil {
			t.Fatal(err)
		}
		got, rest, err := ReadRequest(&buf)
		if err != nil {
			t.Fatalf("ReadRequest(%s) = %v", buf.String(), err)
		}
		if !reflect.DeepEqual(got, req) {
			t.Errorf("round trip of %+v = %+v", req, got)
		}
		if b, _ := io.ReadAll(rest); len(bytes.TrimSpace(b)) != 0 {
			t.Errorf("rest after the request = %q, want nothing", b)
		}
	}
}

// Every kind of answer: a normal exit with output, a failure, a signal, a
// timeout, a call that could not start, truncated outputs, an in-process
// call.
func TestResponseRoundTrip(t *testing.T) {
	for name, resp := range map[string]*Response{
		"exit 0":      {ExitCode: 0, Stdout: []byte(`{"cniVersion":"1.1.0"}`), Duration: 12 * time.Millisecond},
		"exit 1":      {ExitCode: 1, Stdout: []byte(`{"code":100}`), Stderr: []byte("told to fail\n"), Duration: time.Millisecond},
		"signal":      {ExitCode: -1, Signal: "SIGSEGV", Stderr: []byte{0xff, 0}},
		"timed out":   {ExitCode: -1, Signal: "SIGKILL", TimedOut: true, Duration: 2 * time.Second},
		"no start":    {Error: `exec /opt/network/gc: no such file or directory`},
		"truncated":   {Stdout: bytes.Repeat([]byte("o"), 100), StdoutTruncated: true, Stderr: bytes.Repeat([]byte("e"), 100), StderrTruncated: true},
		"in-process":  {InProcess: true, Stdout: []byte("{}")},
		"empty":       {},
		"bad request": {Error: "bad request: no \"path\""},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteResponse(&buf, resp); err != nil {
				t.Fatal(err)
			}
			got, err := ReadResponse(&buf, 100)
			if err != nil {
				t.Fatalf("ReadResponse(%s) = %v", buf.String(), err)
			}
			if !reflect.DeepEqual(got, resp) {
				t.Errorf("round trip = %+v, want %+v", got, resp)
			}
		})
	}
}

// Each malformed request is refused with the error a caller branches on,
// and none reads past its bound.
func TestReadRequestMalformed(t *testing.T) {
	huge := `{"path":"/opt/network/add","timeout":1,"stdin":"` + strings.Repeat("A", MaxRequestSize) + `"}`
	tests := []struct {
		name, in string
		want     error
		mention  string
	}{
		{"nothing (a probe)", "", io.EOF, ""},
		{"blanks (a probe)", " \n\t", io.EOF, ""},
		{"not JSON", "GET / HTTP/1.1\r\n\r\n", ErrBadRequest, "invalid character"},
		{"not an object", `["/opt/network/add"]`, ErrBadRequest, "cannot unmarshal array"},
		{"null", `null`, ErrBadRequest, `no "path"`},
		{"cut short", `{"path":"/opt/network/add","timeout":`, ErrBadRequest, "unexpected EOF"},
		{"wrong type", `{"path":1,"timeout":1}`, ErrBadRequest, "path"},
		{"stdin not base64", `{"path":"/x","timeout":1,"stdin":"%%%"}`, ErrBadRequest, "illegal base64"},
		{"no path", `{"timeout":1000}`, ErrBadRequest, `no "path"`},
		{"no timeout", `{"path":"/x"}`, ErrBadRequest, `"timeout" 0s`},
		{"negative timeout", `{"path":"/x","timeout":-5}`, ErrBadRequest, `"timeout" -5ns`},
		{"negative maxOutput", `{"path":"/x","timeout":1,"maxOutput":-1}`, ErrBadRequest, `"maxOutput" -1`},
		{"maxOutput over the limit", `{"path":"/x","timeout":1,"maxOutput":67108865}`, ErrBadRequest, `"maxOutput" 67108865`},
		{"too large", huge, ErrTooLarge, "larger than 8388608 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &countingReader{r: strings.NewReader(tt.in)}
			req, _, err := ReadRequest(src)
			if !errors.Is(err, tt.want) || req != nil {
				t.Fatalf("ReadRequest = %+v, %v; want %v", req, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not say %q", err, tt.mention)
			}
			if src.n > MaxRequestSize {
				t.Errorf("read %d bytes, past the bound of %d", src.n, MaxRequestSize)
			}
		})
	}
}

// Unknown fields are ignored (a newer kurmad's optional field), and what
// follows the request on the connection is left to the caller.
func TestReadRequestUnknownFieldsAndRest(t *testing.T) {
	req, rest, err := ReadRequest(strings.NewReader(`{"path":"/x","timeout":1,"priority":"high"} trailing`))
	if err != nil || req.Path != "/x" {
		t.Fatalf("ReadRequest = %+v, %v", req, err)
	}
	if b, _ := io.ReadAll(rest); string(b) != " trailing" {
		t.Errorf("rest = %q, want what followed the request", b)
	}
}

func TestReadResponseMalformed(t *testing.T) {
	const maxOutput = 16
	over := AnswerLimit(maxOutput) + 1
	tests := []struct {
		name, in string
		want     error
	}{
		{"no answer", "", io.EOF},
		{"cut short", `{"exitCode":0,"stdout":"e30=`, io.ErrUnexpectedEOF},
		{"stdout over the cap", `{"stdout":"` + b64(strings.Repeat("x", maxOutput+1)) + `"}`, ErrTooLarge},
		{"stderr over the cap", `{"stderr":"` + b64(strings.Repeat("x", maxOutput+1)) + `"}`, ErrTooLarge},
		{"past the answer limit", `{"error":"` + strings.Repeat("x", int(over)) + `"}`, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &countingReader{r: strings.NewReader(tt.in)}
			resp, err := ReadResponse(src, maxOutput)
			if !errors.Is(err, tt.want) || resp != nil {
				t.Fatalf("ReadResponse = %+v, %v; want %v", resp, err, tt.want)
			}
			if int64(src.n) > AnswerLimit(maxOutput) {
				t.Errorf("read %d bytes, past the limit of %d", src.n, AnswerLimit(maxOutput))
			}
		})
	}
	var syn *json.SyntaxError
	if _, err := ReadResponse(strings.NewReader("HTTP/1.1 200 OK\r\n"), 0); !errors.As(err, &syn) {
		t.Errorf("ReadResponse of no JSON = %v, want a *json.SyntaxError", err)
	}
}

// AnswerLimit holds a response with both outputs at the cap.
func TestAnswerLimitHoldsFullOutputs(t *testing.T) {
	for _, max := range []int{1, 1000, DefaultMaxOutput} {
		full := &Response{Error: strings.Repeat("e", 4096), Signal: "SIGKILL", ExitCode: -1, TimedOut: true, InProcess: true,
			Stdout: bytes.Repeat([]byte{0xff}, max), Stderr: bytes.Repeat([]byte{0xfe}, max), StdoutTruncated: true, StderrTruncated: true,
			Duration: time.Hour}
		var buf bytes.Buffer
		if err := WriteResponse(&buf, full); err != nil {
			t.Fatal(err)
		}
		if int64(buf.Len()) > AnswerLimit(max) {
			t.Errorf("a full answer for maxOutput %d is %d bytes, over AnswerLimit %d", max, buf.Len(), AnswerLimit(max))
		}
		if _, err := ReadResponse(&buf, max); err != nil {
			t.Errorf("maxOutput %d: %v", max, err)
		}
	}
	if AnswerLimit(0) != AnswerLimit(DefaultMaxOutput) {
		t.Error("AnswerLimit(0) is not the default's")
	}
}

// The agent's side of a connection, before any call runs: a probe gets no
// answer, a malformed or oversized request gets an answer saying why, and
// each connection is closed after.
func TestServerAnswersBadRequests(t *testing.T) {
	var logged []string
	s := &Server{Log: func(format string, args ...any) { logged = append(logged, format) }}
	for _, tt := range []struct {
		name, in string
		answer   string // in Response.Error; "" → no answer at all
	}{
		{"probe", "", ""},
		{"not JSON", "{{", "bad request: invalid character"},
		{"no timeout", `{"path":"/opt/network/add"}`, `bad request: "timeout" 0s: must be positive`},
		{"too large", `{"path":"` + strings.Repeat("p", MaxRequestSize) + `"}`, "request larger than"},
		{"view without its descriptor", `{"path":"/bin/true","timeout":1000000000,"view":true}`, "no descriptor came with it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logged = nil
			client, agentSide := socketPair(t)
			done := make(chan struct{})
			go func() { defer close(done); s.handle(agentSide) }()
			go func() {
				_, _ = io.WriteString(client, tt.in)
				if tt.answer == "" {
					client.Close() // a probe: connect, then close
				}
			}()
			if tt.answer == "" {
				<-done
				if len(logged) != 0 {
					t.Errorf("a probe was logged: %v", logged)
				}
				return
			}
			resp, err := ReadResponse(client, 0)
			if err != nil {
				t.Fatalf("answer: %v", err)
			}
			if !strings.Contains(resp.Error, tt.answer) || resp.ExitCode != 0 || len(resp.Stdout) != 0 {
				t.Errorf("answer %+v, want Error saying %q", resp, tt.answer)
			}
			if len(logged) != 1 {
				t.Errorf("logged %v, want one line", logged)
			}
			// The agent closed its side (with the rest of a request
			// too large unread, the kernel resets the connection).
			if n, err := client.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, unix.ECONNRESET) {
				t.Errorf("after the answer: read %d, %v; want EOF", n, err)
			}
			client.Close()
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

func b64(s string) string {
	b, _ := json.Marshal([]byte(s))
	return strings.Trim(string(b), `"`)
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
