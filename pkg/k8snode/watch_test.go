package k8snode

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// TestFollowNetworks: a change of a generation's state in kurmad reaches
// the follower as it happens (its wait was held; no timer could bring it:
// the test waits for the delivery, not for a time), and the follower
// survives kurmad's restart: it reconnects and delivers the new kurmad's
// generations.
func TestFollowNetworks(t *testing.T) {
	dir, err := os.MkdirTemp("", "kfol") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kurmad.sock")
	log := logrus.New()
	log.SetOutput(io.Discard)
	serve := func(b api.Backend) (stop func()) {
		l, err := api.Listen(sock, api.ListenOptions{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- api.NewServer(b, api.ServerOptions{Logger: log}).Serve(ctx, l, time.Second) }()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			l.Close()
		}
		t.Cleanup(stop)
		return stop
	}
	first := apitest.New([]string{"podnet"}, 1)
	stop := serve(first)

	got := make(chan []api.Generation, 8)
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() {
		FollowNetworks(ctx, api.NewClient(sock), log, func(g []api.Generation) { got <- g })
		close(followed)
	}()
	defer func() {
		cancel()
		<-followed
	}()
	next := func(what string) api.Generation {
		t.Helper()
		select {
		case g := <-got:
			if len(g) != 1 {
				t.Fatalf("%s: %+v, want podnet's one generation", what, g)
			}
			return g[0]
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not delivered", what)
		}
		panic("unreachable")
	}
	if g := next("the first state"); g.State != api.StateRunning {
		t.Fatalf("the first state: %+v", g)
	}
	// Held: the first answer's revision is waited on (a read for the
	// first answer, one for the held wait).
	waitReads(t, first, 2)
	first.SetGeneration(api.Generation{Network: "podnet", Generation: 1, State: api.StateUnavailable, Reason: "no lease"})
	if g := next("a change"); g.State != api.StateUnavailable || g.Reason != "no lease" {
		t.Errorf("after a change: %+v, want unavailable: no lease", g)
	}

	// kurmad restarts: its held wait is answered as it stops, the
	// follower cannot connect for a while, then the new kurmad answers.
	stop()
	second := apitest.New([]string{"podnet"}, 1)
	second.SetGeneration(api.Generation{Network: "podnet", Generation: 2, State: api.StateStarting})
	serve(second)
	if g := next("the restarted kurmad's state"); g.Generation != 2 || g.State != api.StateStarting {
		t.Errorf("after the restart: %+v, want generation 2 starting", g)
	}
	waitReads(t, second, 2)
	second.SetGeneration(api.Generation{Network: "podnet", Generation: 2, State: api.StateRunning})
	if g := next("a change after the restart"); g.State != api.StateRunning {
		t.Errorf("after a change after the restart: %+v, want running", g)
	}
	select {
	case g := <-got:
		t.Errorf("delivered with nothing changed: %+v", g)
	default:
	}
}

// waitReads waits until b's revision was read n times: a wait on it is
// then held.
func waitReads(t *testing.T, b *apitest.Backend, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "kurmad's wait held", func() error {
		if r := b.RevisionReads(); r < n {
			return fmt.Errorf("revision read %d times, want %d", r, n)
		}
		return nil
	})
}
