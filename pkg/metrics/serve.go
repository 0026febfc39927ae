package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// Listen opens addr for the metrics endpoint: "host:port" (TCP), or an
// absolute path, a unix socket made mode 0600 (a stale socket left by a
// kurmad that died is replaced; any other file there is an api.ErrNotSocket
// error, a socket a process serves an api.ErrSocketServed one).
func Listen(addr string) (net.Listener, error) {
	if !strings.HasPrefix(addr, "/") {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("metrics_listen %s: %w", addr, err)
		}
		return l, nil
	}
	if err := api.RemoveStaleSocket(addr); err != nil {
		return nil, fmt.Errorf("metrics_listen %s: %w", addr, err)
	}
	l, err := net.Listen("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics_listen %s: %w", addr, err)
	}
	if err := os.Chmod(addr, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("metrics_listen %s: %w", addr, err)
	}
	return l, nil
}

// Timeouts of the metrics server: the API server's. A TCP metrics_listen
// is reachable from every plugin container (they share the host's network
// namespace), so a connection that stalls mid-request or sits idle is
// closed instead of holding a goroutine for ever. Variables for the tests.
var (
	readTimeout = api.DefaultReadTimeout
	idleTimeout = api.DefaultIdleTimeout
)

// Serve serves GET /metrics on l until ctx ends (the unix socket file, if
// any, goes with it). Any other path is 404.
func (m *Metrics) Serve(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	hs := &http.Server{Handler: mux, ReadTimeout: readTimeout, IdleTimeout: idleTimeout}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-errc
	return nil
}
