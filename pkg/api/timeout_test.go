package api_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// A client that stops in the middle of its request loses the connection
// at the read timeout; an idle keep-alive connection is closed at the idle
// timeout; a handler that runs longer than the read timeout (here a pod
// create the backend holds until the stalled connection was closed) still
// completes.
func TestServerTimeouts(t *testing.T) {
	const readTimeout, idleTimeout = 300 * time.Millisecond, 400 * time.Millisecond
	stalledClosed := make(chan struct{})
	b := newBackend()
	b.Hook = func(method, arg string) error {
		if method == "CreatePod" {
			select {
			case <-stalledClosed:
			case <-time.After(10 * time.Second):
				return errors.New("the stalled connection was never closed")
			}
		}
		return nil
	}
	sock := apitest.ServeWith(t, b, api.ServerOptions{ReadTimeout: readTimeout, IdleTimeout: idleTimeout})

	created := make(chan error, 1)
	go func() {
		_, err := api.NewClient(sock).CreatePod(context.Background(), api.CreatePodRequest{Networks: []string{"mynet"}})
		created <- err
	}()

	// Taken before the dial: the server's read deadline counts from its
	// accept, which may come before dial returns.
	start := time.Now()
	stalled := dial(t, sock)
	if _, err := io.WriteString(stalled, "POST /v1/pods HTTP/1.1\r\nHost: kurmad\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, stalled, stalled, "a request stalled mid-body")
	close(stalledClosed)
	if took := time.Since(start); took < readTimeout {
		t.Errorf("stalled request's connection closed after %s, before the %s read timeout", took, readTimeout)
	}
	if err := <-created; err != nil {
		t.Errorf("a create running past the read timeout: %v", err)
	}

	idle := dial(t, sock)
	// Taken before the request: the idle timeout counts from the end of
	// the answer, which comes after it.
	start = time.Now()
	br := testutil.KeptAliveGET(t, idle, "/v1/info")
	testutil.WaitClosed(t, idle, br, "an idle keep-alive connection")
	if took := time.Since(start); took < idleTimeout {
		t.Errorf("idle connection closed after %s; the idle timeout is %s", took, idleTimeout)
	}
}

func dial(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
