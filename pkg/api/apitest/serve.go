package apitest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
)

// Serve runs the real api.Server over b on a fresh socket in a short temp
// dir (socket paths are limited to 108 bytes), <tmp>/run/kurmad.sock, until
// t ends, and returns the socket's path. Serve failing is a test error.
func Serve(t testing.TB, b api.Backend) string {
	t.Helper()
	return ServeWith(t, b, api.ServerOptions{})
}

// ServeWith is Serve with the server's options (its Logger is replaced).
func ServeWith(t testing.TB, b api.Backend, opts api.ServerOptions) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "run", "kurmad.sock")
	log := logrus.New()
	log.SetOutput(io.Discard)
	l, err := api.Listen(sock, api.ListenOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts.Logger = log
	go func() { done <- api.NewServer(b, opts).Serve(ctx, l, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		l.Close()
	})
	return sock
}
