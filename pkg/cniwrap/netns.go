package cniwrap

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// maxEthN bounds the search for a free ethN name.
const maxEthN = 1024

// errNoNetns is returned for a netns path that is not (or no longer) a
// network namespace.
var errNoNetns = errors.New("not a network namespace")

// checkNetns returns nil when path names a live network namespace: an nsfs
// bind mount (or a /proc/<pid>/ns/net link). A plain file left after the
// mount was removed does not count.
func checkNetns(path string) error {
	if path == "" {
		return fmt.Errorf("netns path is empty: %w", errNoNetns)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	switch st.Type {
	case unix.NSFS_MAGIC, unix.PROC_SUPER_MAGIC:
		return nil
	}
	return fmt.Errorf("netns %s: %w (is it still mounted?)", path, errNoNetns)
}

// freeIfname returns the first ethN that does not exist in the netns at path.
// It reads the namespace's links through a netlink socket opened inside it,
// so no OS thread of ours ever stays in another namespace.
func freeIfname(path string) (string, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return "", fmt.Errorf("netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return "", fmt.Errorf("netns %s: netlink: %w", path, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return "", fmt.Errorf("netns %s: listing links: %w", path, err)
	}
	used := make(map[string]bool, len(links))
	for _, l := range links {
		used[l.Attrs().Name] = true
	}
	for i := range maxEthN {
		if name := fmt.Sprintf("eth%d", i); !used[name] {
			return name, nil
		}
	}
	return "", fmt.Errorf("netns %s: no free ethN name below eth%d", path, maxEthN)
}
