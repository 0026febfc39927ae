// Package netnsfile makes, enters and removes network namespaces that live
// as bind-mounted files (the pods' /run/kurma/netns/<uuid>): the one way
// kurmad, its tests and the bench make them, so all measure the same code.
package netnsfile

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Create makes a new network namespace and bind-mounts it on path,
// which must not exist. The namespace is made on a dedicated, locked OS
// thread; if that thread cannot be put back into its original namespace it
// is left locked so the Go runtime kills it rather than reuse a thread that
// sits in the pod's namespace.
func Create(path string) error {
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
		_ = Remove(path)
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// LoopbackUp brings up lo inside the namespace mounted at path, through a
// netlink socket opened in it (no thread switching).
func LoopbackUp(path string) error {
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

// Remove deletes the virtual links left in the namespace at path,
// then unmounts it (lazily, so a process still inside does not block it)
// and removes the file. A path that is not mounted or does not exist is not
// an error.
//
// The kernel destroys an unreferenced namespace asynchronously; deleting
// its links first means a veth whose del did not run (a plugin that failed
// half-way, an interface name never learned) is gone from the host's
// bridges when this returns, not some time later.
func Remove(path string) error {
	if IsMounted(path) {
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

// IsMounted reports whether path is a mounted network namespace.
func IsMounted(path string) bool {
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
