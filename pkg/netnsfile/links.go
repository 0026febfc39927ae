package netnsfile

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Links returns the names of every link in the network namespace at path,
// lo included, from one netlink dump made through a socket opened in it (no
// thread of ours stays there). path may be any netns file: a pod's bind
// mount, or a namespace kurmad did not make (/proc/<pid>/ns/net, a
// runtime's /run/netns/<name>). The error wraps os.ErrNotExist when
// nothing is at path.
func Links(path string) ([]string, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	defer ns.Close()
	links, err := linkList(ns, path)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(links))
	for i, l := range links {
		names[i] = l.Attrs().Name
	}
	return names, nil
}

// Handle returns a netlink handle (route family) opened in the network
// namespace at path, any netns file as for Links: to read or change its
// links and addresses from outside it. The caller closes it.
func Handle(path string) (*netlink.Handle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netns %s: netlink: %w", path, err)
	}
	return h, nil
}

// Link is one link of a network namespace: its name and its netlink kind
// ("veth", "bridge", "macvlan", ...; "device" for a physical device).
type Link struct {
	Name string
	Kind string
}

// PodLinks returns every link of the pod network namespace at path, lo
// included, with its kind. path is opened as Open opens it: a symlink, a
// file that is no network namespace, or kurmad's own namespace is refused
// (ErrNotPodNetns), so a planted entry cannot show kurmad the host's links.
func PodLinks(path string) ([]Link, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	links, err := linkList(netns.NsHandle(f.Fd()), path)
	if err != nil {
		return nil, err
	}
	out := make([]Link, len(links))
	for i, l := range links {
		out[i] = Link{Name: l.Attrs().Name, Kind: l.Type()}
	}
	return out, nil
}

// linkList dumps the links of the namespace ns (opened from path, which
// errors name) through a netlink socket opened in it: only the route
// family, as a socket per netlink family is most of the cost of a handle.
func linkList(ns netns.NsHandle, path string) ([]netlink.Link, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netns %s: netlink: %w", path, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netns %s: listing links: %w", path, err)
	}
	return links, nil
}
