package podnet

import (
	"fmt"
	"math/rand/v2"

	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// A pod's name is unique among the pods kurmad holds: every journaled pod,
// listed or not (being created, torn down, or rolled back after a
// restart), keeps its name until its record goes. claimName and forget are
// the only places that rule lives.
//
// A runtime's pod (Runtime) is outside the rule: its name is the runtime's
// (podman passes K8S_POD_NAME=<container name>, so one container on two
// CNI networks is two pods with one name), it claims none and holds none
// against kurmad's own pods.

// claimName reserves name for pod id, or a generated one when name is "",
// and returns the name. It is called with m.mu held.
func (m *Manager) claimName(name, id string) (string, error) {
	if err := m.loadNamesLocked(); err != nil {
		return "", err
	}
	if name == "" {
		name = m.freeNameLocked()
	} else if holder, taken := m.names[name]; taken {
		return "", fmt.Errorf("%w: %q is the name of pod %s (remove it first, or choose another name)", ErrNameInUse, name, holder)
	}
	m.names[name] = id
	return name, nil
}

// forget releases the name, the generations (Networks.Release) and the
// last check of a pod whose record rec went from the journal, and says it
// went (Options.Removed).
func (m *Manager) forget(rec *state.Pod) {
	m.releaseName(rec.ID, rec.Name)
	m.opts.Networks.Release(rec.ID, targets(rec.Attachments)...)
	m.forgetCheck(rec.ID)
	if m.opts.Removed != nil {
		m.opts.Removed(rec.ID)
	}
}

// targets are the generations of as.
func targets(as []state.Attachment) []netplugin.Target {
	ts := make([]netplugin.Target, len(as))
	for i, a := range as {
		ts[i] = target(a)
	}
	return ts
}

// target is the generation of a: where its add ran and its del and
// check go.
func target(a state.Attachment) netplugin.Target {
	return netplugin.Target{Network: a.Network, Generation: a.Generation}
}

// releaseName releases pod id's name.
func (m *Manager) releaseName(id, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.names != nil && m.names[name] == id {
		delete(m.names, name)
	}
}

// loadNamesLocked builds the name index from the journal, once.
func (m *Manager) loadNamesLocked() error {
	if m.names != nil {
		return nil
	}
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		return err
	}
	m.names = map[string]string{}
	for _, r := range recs {
		if r.Name != "" && r.Runtime == nil {
			m.names[r.Name] = r.ID
		}
	}
	return nil
}

// Generated names are "<adjective>_<noun>", as docker names containers;
// after a few collisions a number is added.
var (
	nameAdjectives = []string{
		"amber", "bold", "brave", "bright", "calm", "clever", "cosmic", "crisp", "dapper", "eager",
		"fancy", "fond", "gentle", "glad", "golden", "happy", "hardy", "jolly", "keen", "kind",
		"lively", "lucid", "merry", "mighty", "misty", "nimble", "noble", "plucky", "proud", "quick",
		"quiet", "rapid", "serene", "sharp", "shiny", "silent", "snappy", "steady", "sunny", "swift",
		"tidy", "vivid", "warm", "wise", "witty", "zesty",
	}
	nameNouns = []string{
		"badger", "beacon", "bison", "breeze", "canyon", "comet", "coral", "cricket", "delta", "ember",
		"falcon", "fjord", "gecko", "glacier", "harbor", "heron", "island", "jaguar", "kestrel", "lagoon",
		"lantern", "lynx", "meadow", "meteor", "narwhal", "nebula", "otter", "owl", "panda", "pebble",
		"pelican", "prairie", "quasar", "raven", "reef", "river", "sparrow", "summit", "tapir", "tundra",
		"walrus", "willow", "wombat", "yak", "zebra",
	}
)

// freeNameLocked returns a generated name no journaled pod has.
func (m *Manager) freeNameLocked() string {
	pick := func() string {
		return nameAdjectives[rand.IntN(len(nameAdjectives))] + "_" + nameNouns[rand.IntN(len(nameNouns))]
	}
	for range 8 {
		if n := pick(); m.names[n] == "" {
			return n
		}
	}
	for {
		if n := fmt.Sprintf("%s_%d", pick(), rand.IntN(1000)); m.names[n] == "" {
			return n
		}
	}
}
