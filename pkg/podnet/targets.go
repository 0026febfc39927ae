package podnet

import "fmt"

// Target is one generation of a network's plugin container, as an
// attachment journals it: its add ran there and its del goes there.
type Target struct {
	Network    string
	Generation int
}

func (t Target) String() string { return fmt.Sprintf("%s generation %d", t.Network, t.Generation) }

// InUse returns the generations that pods still need: those of every
// journaled attachment whose del has not succeeded, those creates under way
// may use, and those of the attachments of pods removed by force whose
// network's gc has not run yet. A generation absent from it may be
// stopped: nothing will run in it again. (Creates register their
// generations together with reading the networks, under the lock
// SetNetworks takes, and leave only once their attachments are journaled
// or rolled back; the journal is read after them. A removal by force
// registers its generations before the record goes.)
func (m *Manager) InUse() (map[Target]bool, error) {
	use := map[Target]bool{}
	m.mu.Lock()
	for _, ts := range m.inflight {
		for _, t := range ts {
			use[t] = true
		}
	}
	for t := range m.gcOwed {
		use[t] = true
	}
	m.mu.Unlock()
	journaled, err := m.opts.Store.Networks()
	if err != nil {
		return nil, err
	}
	for _, n := range journaled {
		use[Target{n.Name, n.Generation}] = true
	}
	return use, nil
}
