package testutil

import (
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// BridgeVeths lists the veths enslaved to one of bridges, as
// "<veth> on <bridge>": the host ends of pods' attachments.
func BridgeVeths(bridges []string) []string {
	links, err := netlink.LinkList()
	if err != nil {
		return []string{"netlink: " + err.Error()}
	}
	masters := map[int]string{}
	for _, l := range links {
		if slices.Contains(bridges, l.Attrs().Name) {
			masters[l.Attrs().Index] = l.Attrs().Name
		}
	}
	var out []string
	for _, l := range links {
		if b, ok := masters[l.Attrs().MasterIndex]; ok && l.Type() == "veth" {
			out = append(out, l.Attrs().Name+" on "+b)
		}
	}
	return out
}

// LinksWithPrefix lists the host's links whose name starts with prefix.
func LinksWithPrefix(prefix string) []string {
	links, err := netlink.LinkList()
	if err != nil {
		return []string{"netlink: " + err.Error()}
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// DeleteBridges removes bridges and every veth on them, then every link
// whose name starts with one of prefixes.
func DeleteBridges(bridges []string, prefixes ...string) {
	links, _ := netlink.LinkList()
	masters := map[int]bool{}
	for _, l := range links {
		if slices.Contains(bridges, l.Attrs().Name) {
			masters[l.Attrs().Index] = true
		}
	}
	for _, l := range links {
		if masters[l.Attrs().MasterIndex] && l.Type() == "veth" {
			_ = netlink.LinkDel(l)
		}
	}
	for _, l := range links {
		if masters[l.Attrs().Index] {
			_ = netlink.LinkDel(l)
		}
	}
	for _, l := range links {
		name := l.Attrs().Name
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			_ = netlink.LinkDel(l)
		}
	}
}

// AddLinksIn makes a link of each name in the network namespace at path, as
// a plugin or a runtime may leave there without kurma naming it. They are
// bridge devices, which need no other link (the kernel may lack dummy), and
// go with the namespace.
func AddLinksIn(t testing.TB, path string, names ...string) {
	t.Helper()
	h := handleIn(t, path)
	defer h.Close()
	for _, n := range names {
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n}}); err != nil {
			t.Fatalf("netns %s: add link %s: %v", path, n, err)
		}
	}
}
