package e2e

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/k8snode"
)

// TestFollowNetworks: kurma-node's follower of kurmad's networks (GET
// /v1/networks?wait=R, no timer) hears a real kurmad's changes as they
// happen: a network added by a reload shows fetching or starting, then
// running; it survives kurmad's restart, delivering the restarted
// kurmad's networks without being restarted itself.
func TestFollowNetworks(t *testing.T) {
	e := newEnv(t)
	plain := bridgeNet("plain", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	e.writeConfig([]netDef{plain}, nil)
	e.start()

	log := logrus.New()
	log.SetOutput(io.Discard)
	var mu sync.Mutex
	var seen [][]api.Generation
	heard := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		k8snode.FollowNetworks(ctx, api.NewClient(e.Socket), log, func(g []api.Generation) {
			mu.Lock()
			seen = append(seen, g)
			mu.Unlock()
			select {
			case heard <- struct{}{}:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		<-followed
	}()
	// until waits for a delivery in which network has state.
	until := func(what, network, state string) {
		t.Helper()
		deadline := time.After(90 * time.Second)
		for {
			mu.Lock()
			for _, gens := range seen {
				for _, g := range gens {
					if g.Network == network && g.State == state {
						seen = nil
						mu.Unlock()
						return
					}
				}
			}
			seen = nil
			mu.Unlock()
			select {
			case <-heard:
			case <-deadline:
				t.Fatalf("%s: %s never delivered %s", what, network, state)
			}
		}
	}
	until("at once", "plain", api.StateRunning)

	second := bridgeNet("second", "kt-e2e1", "10.205.0.0/16", "", false)
	e.writeConfig([]netDef{plain, second}, nil)
	e.reload()
	until("a network added by a reload", "second", api.StateRunning)

	// Only the restarted kurmad can tell of third: the follower
	// reconnected.
	e.stop()
	e.start()
	third := bridgeNet("third", "kt-e2e1", "10.206.0.0/16", "", false)
	e.writeConfig([]netDef{plain, second, third}, nil)
	e.reload()
	until("a network added after kurmad's restart", "third", api.StateRunning)
}
