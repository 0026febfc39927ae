package testutil

import (
	"fmt"
	"os/exec"
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

// DelLinkIn deletes the link name in the network namespace at path, as an
// operator (or a stray tool) might by hand.
func DelLinkIn(t testing.TB, path, name string) {
	t.Helper()
	h := handleIn(t, path)
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("netns %s: %s: %v", path, name, err)
	}
	if err := h.LinkDel(l); err != nil {
		t.Fatalf("netns %s: delete %s: %v", path, name, err)
	}
}

// MasqueradeRules lists the rules the CNI bridge plugin's ipMasq made
// through nftables (table inet cni_plugins_masquerade, chain masq_checks)
// whose text contains one of ids (container IDs are in each rule's
// comment). No table, or no nft, is no rule.
func MasqueradeRules(ids ...string) []string {
	out, err := exec.Command("nft", "-a", "list", "chain", "inet", "cni_plugins_masquerade", "masq_checks").Output()
	if err != nil {
		return nil
	}
	var rules []string
	for _, line := range strings.Split(string(out), "\n") {
		if slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(line, id) }) {
			rules = append(rules, strings.TrimSpace(line))
		}
	}
	return rules
}

// DeleteMasqueradeRules deletes the rules MasqueradeRules lists for ids,
// for a test's cleanup; it returns the first error.
func DeleteMasqueradeRules(ids ...string) error {
	for _, r := range MasqueradeRules(ids...) {
		_, handle, ok := strings.Cut(r, "# handle ")
		if !ok {
			return fmt.Errorf("no handle in nft rule %q", r)
		}
		if out, err := exec.Command("nft", "delete", "rule", "inet", "cni_plugins_masquerade", "masq_checks", "handle", handle).CombinedOutput(); err != nil {
			return fmt.Errorf("nft delete rule %s: %v: %s", handle, err, out)
		}
	}
	return nil
}
