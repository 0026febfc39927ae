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

// ErrNotPodNetns means a path is not a pod network namespace kurma may
// work in: a symlink, a plain file or directory, a namespace of another
// kind, or kurmad's own network namespace bind-mounted there. Entries of
// the netns dir are never followed: plugin containers see that dir, and a
// planted symlink must not lead kurmad to the host's links or mounts.
var ErrNotPodNetns = errors.New("not a pod network namespace")

// Open opens the network namespace bind-mounted at path, without following
// a symlink at path, and checks that it is one: an nsfs mount of a network
// namespace that is not the one kurmad itself runs in. The error wraps
// ErrNotPodNetns when path exists but is no such namespace.
func Open(path string) (*os.File, error) {
	// O_PATH first: opening a planted FIFO for reading would block.
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("netns %s: a symlink: %w", path, ErrNotPodNetns)
		}
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	defer unix.Close(pfd)
	if err := checkNsfs(pfd); err != nil {
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	// An nsfs file is safe to open for real through the O_PATH fd.
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", pfd), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	if err := checkPodNetns(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	return f, nil
}

// checkNsfs checks that fd is a namespace file (nsfs), ErrNotPodNetns
// otherwise.
func checkNsfs(fd int) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("not a namespace: %w", ErrNotPodNetns)
	}
	return nil
}

// checkPodNetns checks that f is a network namespace other than kurmad's.
func checkPodNetns(f *os.File) error {
	typ, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("namespace type: %w", err)
	}
	if typ != unix.CLONE_NEWNET {
		return fmt.Errorf("a namespace of another kind: %w", ErrNotPodNetns)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	own, err := ownNetns()
	if err != nil {
		return err
	}
	if st.Dev == own.Dev && st.Ino == own.Ino {
		return fmt.Errorf("kurmad's own network namespace: %w", ErrNotPodNetns)
	}
	return nil
}

// ownNetns identifies the network namespace kurmad runs in: the process's,
// not PID 1's (/proc/1/ns may be hidden, and kurmad may itself run in a
// namespace of its own), for that is where its links are. It is read once,
// at package initialisation, because /proc/self/ns/net shows the main
// thread's namespace, and Create may run on the main thread while it sits
// in a new namespace.
var ownNetns = func() func() (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Stat("/proc/self/ns/net", &st)
	if err != nil {
		err = fmt.Errorf("own network namespace: %w", err)
	}
	return func() (unix.Stat_t, error) { return st, err }
}()

// Do runs fn on an OS thread that has entered the network namespace at
// path (any netns file, as for Links): for what can only be read from
// inside, such as its /proc/sys/net. The thread is never returned to the
// Go runtime: it ends with fn.
func Do(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, in another netns, ends with the goroutine
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", path, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("netns %s: enter: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// LoopbackUp brings up lo inside the namespace mounted at path, through a
// netlink socket opened in it (no thread switching).
func LoopbackUp(path string) error {
	f, err := Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
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
//
// Nothing at path is followed: links are deleted only in a namespace Open
// accepts, the unmount does not follow a symlink, and a symlink, file or
// empty directory planted there is removed itself, never its target.
func Remove(path string) error {
	if f, err := Open(path); err == nil {
		flushLinks(f)
		f.Close()
	}
	return Unbind(path)
}

// IsMounted reports whether path is a mounted pod network namespace (see
// Open).
func IsMounted(path string) bool {
	f, err := Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// flushLinks deletes every link in the namespace f except lo and physical
// devices (those go back to the host when the namespace dies). Best effort.
func flushLinks(f *os.File) {
	h, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
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
