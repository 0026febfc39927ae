package testutil

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// WaitClosed reads r (c's data, perhaps through a buffered reader) until
// the server closes c, failing t if c is still open after 10 s. What the
// server writes before closing (a 408, nothing) does not matter.
func WaitClosed(t testing.TB, c net.Conn, r io.Reader, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open", what)
	}
}

// KeptAliveGET sends GET path over c and reads the answer, failing t unless
// it is 200 on a connection the server keeps open; it returns the reader
// to go on reading c through.
func KeptAliveGET(t testing.TB, c net.Conn, path string) *bufio.Reader {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: kurmad\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET %s: %s, close %v; want 200 on a kept-alive connection", path, resp.Status, resp.Close)
	}
	return br
}
