package podnet

import (
	"errors"
	"os"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/state"
)

// unclaimedLink returns the one interface in the pod's netns (lo and
// physical devices aside) that no attachment names, or "" when there is
// none or more than one. It is the interface an add that did not finish
// (failed after making it, timed out, or kurmad died) left behind when the
// plugin picked the name: without it del cannot find the attachment and
// IPAM would keep its address. Adds are serial, so at most one attachment
// of a pod is in that state.
func unclaimedLink(rec *state.Pod) string {
	links, err := netnsfile.PodLinks(rec.Netns)
	if err != nil {
		return ""
	}
	claimed := map[string]bool{"lo": true}
	for _, a := range rec.Attachments {
		claimed[a.Interface] = true
	}
	found := ""
	for _, l := range links {
		if claimed[l.Name] || l.Kind == "device" {
			continue
		}
		if found != "" {
			return ""
		}
		found = l.Name
	}
	return found
}

// newNetnsLinks are the links of a namespace netnsfile.Create has just
// made: lo alone. (A kernel with tunnel modules loaded also puts fallback
// devices such as tunl0 or sit0 in every new namespace; no ethN meets them,
// and a template that renders one fails in the plugin's add.)
var newNetnsLinks = []string{"lo"}

// linksBefore returns the links in the pod's netns before an add: one
// netlink dump in it, or, for the first add, whose intent is made before
// kurmad makes the namespace (see prepare), newNetnsLinks.
func linksBefore(netnsPath string) ([]string, error) {
	links, err := netnsfile.Links(netnsPath)
	if errors.Is(err, os.ErrNotExist) {
		return newNetnsLinks, nil
	}
	return links, err
}

// prepared is what prepare makes for a new pod: its netns, and its dir
// with the host's resolv.conf. The first add waits for the netns alone;
// the dir, which no add reads, is waited for after the adds (waitDir).
type prepared struct {
	netnsDone, dirDone chan struct{}
	netnsErr, dirErr   error
}

// waitNetns waits for the netns and returns what failed making it.
func (p *prepared) waitNetns() error {
	<-p.netnsDone
	return p.netnsErr
}

// waitDir waits for the pod's dir and returns what failed making it.
func (p *prepared) waitDir() error {
	<-p.dirDone
	return p.dirErr
}

// wait waits for prepare to finish and returns what failed.
func (p *prepared) wait() error {
	return errors.Join(p.waitNetns(), p.waitDir())
}

// prepare starts making, in the background, what the pod needs before its
// first add and what needs no ordering against the commit of its intent:
// the netns (makeNetns), and, for a pod kurmad made, the pod's dir holding
// the host's resolv.conf (writeResolvConf replaces it when a result has
// DNS; a runtime's pod gets none, see writeResolvConf). Create commits the
// intent meanwhile and waits for the netns before the first add, which
// makes host-side state and so must follow the commit, and for the dir
// after the adds (it is the pod's answer's, not the plugins'). A crash
// before the commit leaves a netns file and a dir named like a pod the
// journal does not hold, which the next boot's Collect removes; Collect
// leaves those of a create under way alone (see creating).
func (m *Manager) prepare(rec *state.Pod) *prepared {
	p := &prepared{netnsDone: make(chan struct{}), dirDone: make(chan struct{})}
	go func() {
		p.netnsErr = m.makeNetns(rec)
		close(p.netnsDone)
	}()
	if rec.Runtime == nil {
		go func() {
			p.dirErr = m.writeHostResolvConf(rec.ID)
			close(p.dirDone)
		}()
	} else {
		close(p.dirDone)
	}
	return p
}

// unprepare removes what prepare made for a pod whose intent was not
// journaled, once prepare is over.
func (m *Manager) unprepare(p *prepared, rec *state.Pod) error {
	_ = p.wait()
	return errors.Join(removeNetns(rec), m.removePodDir(rec.ID))
}
