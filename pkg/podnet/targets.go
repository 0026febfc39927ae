package podnet

import "github.com/kurma-project/kurma/pkg/netplugin"

// InUse returns the generations that pods still need: those of every
// journaled attachment whose del has not succeeded, those creates under way
// may use, and those of the attachments of pods removed by force whose
// network's gc has not run yet. A generation absent from it may be
// stopped: nothing will run in it again. (Creates register their
// generations together with reading the networks, under the lock
// SetNetworks takes, and leave only once their attachments are journaled
// or rolled back; the journal is read after them. A removal by force
// registers its generations before the record goes.)
func (m *Manager) InUse() (map[netplugin.Target]bool, error) {
	use := map[netplugin.Target]bool{}
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
	journaled, err := m.opts.Store.AttachedGenerations()
	if err != nil {
		return nil, err
	}
	for _, n := range journaled {
		use[netplugin.Target{Network: n.Network, Generation: n.Generation}] = true
	}
	return use, nil
}
