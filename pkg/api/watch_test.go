package api_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// TestWaitNetworks: GET /v1/networks?wait=R holds its answer while the
// revision is R and answers the new state once it changes; a revision
// another kurmad gave is answered at once; a stopping server answers the
// waits it holds instead of keeping its shutdown waiting.
func TestWaitNetworks(t *testing.T) {
	b := newBackend()
	c := api.NewClient(apitest.Serve(t, b))
	ctx := context.Background()
	nets, rev, err := c.WaitNetworks(ctx, "")
	if err != nil || rev == "" || len(nets) != 3 {
		t.Fatalf("first answer: %d generations, revision %q, %v", len(nets), rev, err)
	}
	type answer struct {
		nets []api.Generation
		rev  string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		n, r, err := c.WaitNetworks(ctx, rev)
		got <- answer{n, r, err}
	}()
	// The change comes only once the wait is held (the request seen):
	// otherwise the answer could not tell a held wait from none.
	b.WaitRevisionReads(t, 2)
	select {
	case a := <-got:
		t.Fatalf("answered with nothing changed: revision %q, %v", a.rev, a.err)
	default:
	}
	b.SetGeneration(api.Generation{Network: "other", State: api.StateFailed, Reason: "it broke"})
	a := <-got
	if a.err != nil || a.rev == rev {
		t.Fatalf("after a change: revision %q (was %q), %v", a.rev, rev, a.err)
	}
	if i := indexOf(a.nets, "other"); i < 0 || a.nets[i].State != api.StateFailed || a.nets[i].Reason != "it broke" {
		t.Errorf("the answer does not show the change: %+v", a.nets)
	}

	// Another kurmad's revision (a restart): at once.
	if _, r, err := c.WaitNetworks(ctx, "earlier-kurmad-7"); err != nil || r != a.rev {
		t.Errorf("a revision of another kurmad: %q, %v; want %q at once", r, err, a.rev)
	}
}

// TestWaitNetworksShutdown: a held wait is answered (same revision) when
// the server stops, well before its grace period ends.
func TestWaitNetworksShutdown(t *testing.T) {
	b := newBackend()
	log := logrus.New()
	log.SetOutput(io.Discard)
	sock := t.TempDir() + "/k.sock"
	l, err := api.Listen(sock, api.ListenOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- api.NewServer(b, api.ServerOptions{Logger: log}).Serve(ctx, l, time.Hour) }()
	c := api.NewClient(sock)
	_, rev, err := c.WaitNetworks(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, r, err := c.WaitNetworks(context.Background(), rev)
		if err == nil && r != rev {
			err = errors.New("the revision changed: " + r)
		}
		got <- err
	}()
	b.WaitRevisionReads(t, 2)
	cancel()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("a held wait at shutdown: %v; want the same revision", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a held wait was not answered at shutdown: the server waits for it (grace: an hour)")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func indexOf(nets []api.Generation, name string) int {
	for i, n := range nets {
		if n.Network == name {
			return i
		}
	}
	return -1
}
