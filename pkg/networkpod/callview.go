package networkpod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// A call's view: every call runs in a mount namespace of its own, a copy of
// its container's in which the netns dir (<RunDir>/netns, at the same path
// as on the host) holds only the network namespaces the call's arguments
// name: the add or del of a pod reaches that pod's namespace and no other
// pod's, and a status call none. A gc call sees them all, read-only: it
// deletes the attachments of pods kurmad may have forgotten (a lost
// journal), which only the plugin's cache names. The container itself (its main
// executable) sees an empty netns dir unless its network asks for the pods'
// (main_sees_pods). kurmad makes the namespace (the filter keeps mount from
// everything in the container) and hands it to the exec agent with the
// call; the agent starts every process of the call in it (agent.View).
//
// This file is the whole of kurmad's side: a transport that reuses
// connections or premade namespaces changes who carries the descriptor,
// not how the view is made.

// allNetns, as the names of a view, shows the whole netns dir.
var allNetns = []string{"*"}

// viewedNetns is what a call of path with args sees of the netns dir: for
// gc, every namespace (it deletes the attachments of pods kurmad forgot,
// whose namespaces only the plugin's cache names); for any other call, the
// netns files its arguments name, each once, in order: arguments that are
// a path of an entry directly in the dir.
func (h *Host) viewedNetns(path string, args []string) []string {
	if path == netplugin.GCPath {
		return allNetns
	}
	dir := h.NetnsDir()
	var out []string
	for _, a := range args {
		if filepath.IsAbs(a) && filepath.Clean(a) == a && filepath.Dir(a) == dir {
			name := filepath.Base(a)
			seen := false
			for _, o := range out {
				seen = seen || o == name
			}
			if !seen {
				out = append(out, name)
			}
		}
	}
	return out
}

// makeCallView makes a call's mount namespace in the container whose mount
// namespace mntns is, showing the netns files of names (those that exist
// and are mounted network namespaces; allNetns: the whole dir, read-only),
// and returns it (close-on-exec).
func (h *Host) makeCallView(mntns *os.File, names []string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread changes its mount namespace and filesystem context:
		// it is never unlocked, so it ends with this goroutine.
		runtime.LockOSThread()
		f, err := h.buildCallView(mntns, names)
		ch <- result{f, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("call view: %w", r.err)
	}
	return r.f, nil
}

// buildCallView does makeCallView's work on a locked thread it may leave
// in any namespace.
func (h *Host) buildCallView(mntns *os.File, names []string) (*os.File, error) {
	dir := h.NetnsDir()
	// Detached copies of the pods' netns mounts, taken in kurmad's own
	// mount namespace, to attach in the view.
	var trees []int
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	if slices.Equal(names, allNetns) {
		return h.buildWholeView(mntns)
	}
	var shown []string
	for _, name := range names {
		fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(dir, name),
			unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
			continue // gone (a del after its netns): the call finds no file, as on the host
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		var st unix.Statfs_t
		if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.NSFS_MAGIC {
			unix.Close(fd) // not a namespace: nothing kurmad would hand a plugin
			continue
		}
		trees, shown = append(trees, fd), append(shown, name)
	}
	proc, err := enterCopy(mntns)
	if err != nil {
		return nil, err
	}
	defer unix.Close(proc)
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=755,size=64k"); err != nil {
		return nil, fmt.Errorf("netns dir: %w", err)
	}
	for i, name := range shown {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o444); err != nil {
			return nil, err
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
		return nil, fmt.Errorf("netns dir read-only: %w", err)
	}
	return threadMountNamespace(proc)
}

// buildWholeView is buildCallView for a view of the whole netns dir: a
// read-only copy of the host's, as it is when the call starts.
func (h *Host) buildWholeView(mntns *os.File) (*os.File, error) {
	dir := h.NetnsDir()
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("netns dir: %w", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return nil, fmt.Errorf("netns dir read-only: %w", err)
	}
	proc, err := enterCopy(mntns)
	if err != nil {
		return nil, err
	}
	defer unix.Close(proc)
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("netns dir: %w", err)
	}
	return threadMountNamespace(proc)
}

// enterCopy moves the calling (locked) thread into a new mount namespace,
// a copy of mntns, and returns a descriptor of kurmad's /proc, opened
// before (threadMountNamespace needs it).
func enterCopy(mntns *os.File) (proc int, err error) {
	proc, err = unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if e := unix.Unshare(unix.CLONE_FS); e != nil {
		err = fmt.Errorf("unshare the filesystem context: %w", e)
	} else if e := unix.Setns(int(mntns.Fd()), unix.CLONE_NEWNS); e != nil {
		err = fmt.Errorf("enter the container's mount namespace: %w", e)
	} else if e := unix.Unshare(unix.CLONE_NEWNS); e != nil {
		err = fmt.Errorf("new mount namespace: %w", e)
	}
	if err != nil {
		unix.Close(proc)
		return -1, err
	}
	return proc, nil
}

// threadMountNamespace opens the calling thread's mount namespace through
// proc, kurmad's procfs (the container's knows no thread of kurmad's).
func threadMountNamespace(proc int) (*os.File, error) {
	fd, err := unix.Openat(proc, "thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "call-view"), nil
}

// openMountNamespace opens the mount namespace of the container process
// pid (a host PID) for its calls' views.
func openMountNamespace(pid int) (*os.File, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return nil, fmt.Errorf("the container's mount namespace: %w", err)
	}
	return f, nil
}
