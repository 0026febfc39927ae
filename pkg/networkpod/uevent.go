package networkpod

import (
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// The uevent guard (agent.UeventGuard): each container's agent guards its
// container's net sysfs mounts itself (its -guard-sys flag), from before
// its main starts for as long as it runs, kurmad's absence included;
// kurmad guards each call's view, a copy of those mounts that a mark does
// not follow, with a group of its own.

// ueventGuard is a Host's fanotify group for the calls' views; nil where
// fanotify is not to be had.
type ueventGuard struct{ g *agent.UeventGuard }

// newUeventGuard makes the group and starts answering it.
func newUeventGuard(log logrus.FieldLogger) (*ueventGuard, error) {
	g, err := agent.NewUeventGuard(func(format string, args ...any) { log.Warnf(format, args...) })
	if err != nil {
		return nil, err
	}
	return &ueventGuard{g}, nil
}

func (g *ueventGuard) close() {
	if g != nil {
		g.g.Close()
	}
}

// mark watches the net sysfs mounts under root ("/" for the calling
// thread's mount namespace: a call's view).
func (g *ueventGuard) mark(root string) error {
	if g == nil {
		return nil
	}
	return g.g.Mark(root, writableSysPaths)
}
