package podnet

import (
	"errors"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

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
	f, err := netnsfile.Open(rec.Netns)
	if err != nil {
		return ""
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
	if err != nil {
		return ""
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return ""
	}
	claimed := map[string]bool{"lo": true}
	for _, a := range rec.Attachments {
		claimed[a.Interface] = true
	}
	found := ""
	for _, l := range links {
		name := l.Attrs().Name
		if claimed[name] || l.Type() == "device" {
			continue
		}
		if found != "" {
			return ""
		}
		found = name
	}
	return found
}

// newNetnsLinks are the links of a namespace netnsfile.Create has just
// made: lo alone. (A kernel with tunnel modules loaded also puts fallback
// devices such as tunl0 or sit0 in every new namespace; no ethN meets them,
// and a template that renders one fails in the plugin's add.)
var newNetnsLinks = []string{"lo"}

// linksBefore returns the links in the pod's netns before an add: one
// netlink dump in it, or, for the first add, whose intent is journaled
// before kurmad makes the namespace, newNetnsLinks.
func linksBefore(netnsPath string) ([]string, error) {
	links, err := netnsfile.Links(netnsPath)
	if errors.Is(err, os.ErrNotExist) {
		return newNetnsLinks, nil
	}
	return links, err
}
