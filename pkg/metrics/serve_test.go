package metrics

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// A TCP metrics endpoint (which plugin containers can reach: they share
// the host's network) closes a connection that stalls mid-request at the
// read timeout and a kept-alive one left idle at the idle timeout, and
// still answers GET /metrics in between.
func TestServeTimeouts(t *testing.T) {
	oldRead, oldIdle := readTimeout, idleTimeout
	readTimeout, idleTimeout = 300*time.Millisecond, 400*time.Millisecond
	t.Cleanup(func() { readTimeout, idleTimeout = oldRead, oldIdle })

	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Sources{}).Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closedAfter := func(c net.Conn, r io.Reader, what string, least time.Duration, start time.Time) {
		t.Helper()
		testutil.WaitClosed(t, c, r, what)
		if took := time.Since(start); took < least {
			t.Errorf("%s: closed after %s, before its %s timeout", what, took, least)
		}
	}

	start := time.Now() // before the dial: the read deadline counts from the accept
	stalled := dial()
	if _, err := io.WriteString(stalled, "GET /metrics HTTP/1.1\r\nHost: kurmad\r\n"); err != nil {
		t.Fatal(err)
	}
	closedAfter(stalled, stalled, "a request stalled in its headers", readTimeout, start)

	idle := dial()
	start = time.Now() // before the request: the idle timeout counts from the answer
	br := testutil.KeptAliveGET(t, idle, "/metrics")
	closedAfter(idle, br, "an idle kept-alive connection", idleTimeout, start)
}
