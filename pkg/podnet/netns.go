package podnet

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/state"
)

// createNetns makes a new network namespace and bind-mounts it on path,
// which must not exist. The namespace is made on a dedicated, locked OS
// thread; if that thread cannot be put back into its original namespace it
// is left locked so the Go runtime kills it rather than reuse a thread that
// sits in the pod's namespace.
func createNetns(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	f.Close()

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		mountErr := unix.Mount(src, path, "none", unix.MS_BIND, "")
		if mountErr != nil {
			mountErr = fmt.Errorf("bind mount %s: %w", src, mountErr)
		}
		if err := netns.Set(orig); err != nil {
			// Stay locked: the goroutine exits and the thread dies with it.
			errc <- errors.Join(mountErr, fmt.Errorf("restore original netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- mountErr
	}()
	if err := <-errc; err != nil {
		_ = removeNetns(path)
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// loopbackUp brings up lo inside the namespace mounted at path, through a
// netlink socket opened in it (no thread switching).
func loopbackUp(path string) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netns %s: netlink: %w", path, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("netns %s: find lo: %w", path, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("netns %s: set lo up: %w", path, err)
	}
	return nil
}

// removeNetns deletes the virtual links left in the namespace at path,
// then unmounts it (lazily, so a process still inside does not block it)
// and removes the file. A path that is not mounted or does not exist is not
// an error.
//
// The kernel destroys an unreferenced namespace asynchronously; deleting
// its links first means a veth whose del did not run (a plugin that failed
// half-way, an interface name never learned) is gone from the host's
// bridges when this returns, not some time later.
func removeNetns(path string) error {
	if isNetns(path) {
		flushLinks(path)
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns %s: unmount: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// isNetns reports whether path is a mounted network namespace.
func isNetns(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC || st.Type == unix.PROC_SUPER_MAGIC
}

// flushLinks deletes every link in the namespace except lo and physical
// devices (those go back to the host when the namespace dies). Best effort.
func flushLinks(path string) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" || l.Type() == "device" {
			continue
		}
		_ = h.LinkDel(l)
	}
}

// unclaimedLink returns the one interface in the pod's netns (lo and
// physical devices aside) that no attachment names, or "" when there is
// none or more than one. It is the interface an add that did not finish
// (failed after making it, timed out, or kurmad died) left behind when the
// plugin picked the name: without it del cannot find the attachment and
// IPAM would keep its address. Adds are serial, so at most one attachment
// of a pod is in that state.
func unclaimedLink(rec *state.Pod) string {
	if !isNetns(rec.Netns) {
		return ""
	}
	ns, err := netns.GetFromPath(rec.Netns)
	if err != nil {
		return ""
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
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
