package podnet

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// A gc that could not run because no generation of its network runs
// (ErrGCWaits) waits, as a del does: RunRetries runs it once one runs
// (Networks.Started). A pod removed by force owes a gc to the networks
// whose del did not succeed, and the generation its add ran in stays held
// (by gcHolder) until that gc ran, so that a retiring generation is not
// stopped before it.

// gcHolder holds the generations kept for the gcs removals by force owe.
const gcHolder = "gc owed by a removal by force"

// gcWaits remembers that network's gc waits.
func (m *Manager) gcWaits(network string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gcWait[network] = true
}

// gcsRan ends the wait of the gcs of ran, which ran (failed when one of
// them failed) or found their network gone, and frees the generations a
// removal by force kept for them. When no gc waits any more, the orphan
// netns files a Collect kept for them go, if every one succeeded.
func (m *Manager) gcsRan(ran []string, failed bool) {
	m.mu.Lock()
	if failed {
		m.sweepDue = false
	}
	rest := 0
	for n := range m.gcWait {
		if !slices.Contains(ran, n) {
			rest++
		}
	}
	sweep := rest == 0 && m.sweepDue
	m.mu.Unlock()
	if sweep {
		m.sweepOrphans(true, m.log.WithField("op", "gc"))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range ran {
		m.endWaitLocked(n)
	}
}

func (m *Manager) endWaitLocked(network string) {
	delete(m.gcWait, network)
	var freed []netplugin.Target
	for t := range m.gcOwed {
		if t.Network == network {
			delete(m.gcOwed, t)
			freed = append(freed, t)
		}
	}
	if len(freed) > 0 {
		m.opts.Networks.Release(gcHolder, freed...)
	}
	if len(m.gcWait) == 0 {
		m.sweepDue = false
	}
}

// oweGC records that the networks of ts owe a gc (their dels did not
// succeed for a pod removed by force), keeping each generation for it. It
// runs when the caller runs GC, or with the gcs that wait.
func (m *Manager) oweGC(ts []netplugin.Target) {
	if len(ts) == 0 {
		return
	}
	if err := m.opts.Networks.Retain(gcHolder, ts...); err != nil {
		m.log.WithError(err).Warn("cannot keep the generations a gc owed by a removal by force runs in")
	}
	m.mu.Lock()
	for _, t := range ts {
		m.gcWait[t.Network] = true
		m.gcOwed[t] = true
	}
	m.mu.Unlock()
}

// WaitingGCs names the networks whose gc waits for a plugin container of
// the network to run (or is owed by a removal by force and has not run
// yet), sorted.
func (m *Manager) WaitingGCs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.gcWait))
	for n := range m.gcWait {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// runWaitingGCs runs every gc that waits and can run now. Once the last
// of them ran, the orphan netns files a Collect kept for them go, when
// every one succeeded.
func (m *Manager) runWaitingGCs(ctx context.Context) {
	log := m.log.WithField("op", "gc")
	var ran []string
	failed := false
	for _, name := range m.WaitingGCs() {
		if ctx.Err() != nil {
			return
		}
		err := m.gc(ctx, name)
		if errors.Is(err, ErrGCWaits) {
			continue
		}
		if err != nil {
			failed = true
			log.WithError(err).WithField("network", name).Warn("gc failed; orphan netns files are kept until the next gc")
		} else {
			log.WithField("network", name).Info("gc ran, once the network's plugin container ran")
		}
		ran = append(ran, name)
	}
	if len(ran) > 0 {
		m.gcsRan(ran, failed)
	}
}

// gcRunner runs runWaitingGCs in the background for RunRetries, one run
// at a time, again after a run when it was asked meanwhile.
type gcRunner struct {
	mu      sync.Mutex
	running bool
	again   bool
}

// start runs fn unless a run is under way, which then runs once more.
func (g *gcRunner) start(wg *sync.WaitGroup, fn func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running {
		g.again = true
		return
	}
	g.running = true
	wg.Go(func() {
		for {
			fn()
			g.mu.Lock()
			if !g.again {
				g.running = false
				g.mu.Unlock()
				return
			}
			g.again = false
			g.mu.Unlock()
		}
	})
}
