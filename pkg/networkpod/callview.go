package networkpod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

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
// and returns it (close-on-exec). The pods' netns mounts are copied here, in
// kurmad's own mount namespace; one of the view threads (below) makes the
// namespace and attaches them.
func (h *Host) makeCallView(mntns *os.File, names []string) (*os.File, error) {
	job := viewJob{mntns: mntns, dir: h.NetnsDir(), whole: -1, done: make(chan viewResult, 1), uevents: h.uevents}
	// Detached copies of the pods' netns mounts, to attach in the view.
	defer func() {
		for _, fd := range job.trees {
			unix.Close(fd)
		}
		if job.whole >= 0 {
			unix.Close(job.whole)
		}
	}()
	if slices.Equal(names, allNetns) {
		tree, err := unix.OpenTree(unix.AT_FDCWD, job.dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return nil, fmt.Errorf("call view: netns dir: %w", err)
		}
		job.whole = tree
		// Private: a clone of the shared netns dir is a peer of the
		// host's, through which a mount on it in the view (or in a copy
		// of the view) would land on the host's.
		attr := unix.MountAttr{
			Attr_set:    unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC,
			Propagation: unix.MS_PRIVATE,
		}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return nil, fmt.Errorf("call view: netns dir read-only: %w", err)
		}
	} else {
		for _, name := range names {
			fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(job.dir, name),
				unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
				continue // gone (a del after its netns): the call finds no file, as on the host
			}
			if err != nil {
				return nil, fmt.Errorf("call view: %s: %w", name, err)
			}
			var st unix.Statfs_t
			if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.NSFS_MAGIC {
				unix.Close(fd) // not a namespace: nothing kurmad would hand a plugin
				continue
			}
			job.trees, job.shown = append(job.trees, fd), append(job.shown, name)
		}
	}
	viewThreads.Do(startViewThreads)
	viewJobs <- job
	r := <-job.done
	if r.err != nil {
		return nil, fmt.Errorf("call view: %w", r.err)
	}
	return r.f, nil
}

// The view threads. Making a mount namespace moves the thread that makes
// it into it, so views are made on threads of their own: goroutines locked
// to their threads for good (a thread whose filesystem context is its own
// never serves another goroutine), each of which goes back to kurmad's
// mount namespace after every view. Reused, they spare each call a thread
// made and ended. A thread that fails in any step is ended, and another
// takes its place.

// viewThreadCount is how many views can be in the making at once.
const viewThreadCount = 2

var (
	viewThreads sync.Once
	viewJobs    = make(chan viewJob)
)

// viewJob is one view to make: in a copy of mntns, the netns dir (dir)
// holds trees (detached netns mounts) under the names shown, or, when whole
// is not -1, is the detached tree whole.
type viewJob struct {
	mntns *os.File
	dir   string
	trees []int
	shown []string
	whole int
	done  chan viewResult
	// uevents watches the view's net sysfs mounts (uevent.go): copies of
	// the container's, which a mount mark does not follow.
	uevents *ueventGuard
}

type viewResult struct {
	f   *os.File
	err error
}

func startViewThreads() {
	for range viewThreadCount {
		go viewThread()
	}
}

// viewThread makes views until one fails; then a new thread takes its
// place and this one ends with its goroutine.
func viewThread() {
	runtime.LockOSThread() // never unlocked (see above)
	t, err := newViewThreadState()
	for job := range viewJobs {
		var f *os.File
		if err == nil {
			f, err = t.build(job)
		}
		job.done <- viewResult{f, err}
		if err != nil {
			go viewThread()
			return
		}
	}
}

// viewThreadState is what a view thread keeps: descriptors of kurmad's
// /proc (the container's knows no thread of kurmad's) and of its mount
// namespace, to go back to.
type viewThreadState struct {
	proc, home int
}

// newViewThreadState gives the calling (locked) thread a filesystem context
// of its own, as setns into a mount namespace requires.
func newViewThreadState() (*viewThreadState, error) {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, fmt.Errorf("unshare the filesystem context: %w", err)
	}
	proc, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	home, err := unix.Openat(proc, "thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(proc)
		return nil, fmt.Errorf("kurmad's mount namespace: %w", err)
	}
	return &viewThreadState{proc: proc, home: home}, nil
}

// build makes job's view and brings the thread back to kurmad's mount
// namespace; an error leaves the thread anywhere.
func (t *viewThreadState) build(job viewJob) (*os.File, error) {
	if err := unix.Setns(int(job.mntns.Fd()), unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("enter the container's mount namespace: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("new mount namespace: %w", err)
	}
	// Nothing mounted in a view may reach another namespace: the
	// container's mounts are slaves of the host's, but a view copied from
	// a namespace that holds a peer of the host's netns dir would mount
	// its tmpfs over the host's, hiding every pod's netns file.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return nil, fmt.Errorf("view mounts as slaves: %w", err)
	}
	if err := populateView(job); err != nil {
		return nil, err
	}
	if err := job.uevents.mark("/"); err != nil {
		return nil, err
	}
	f, err := threadMountNamespace(t.proc)
	if err != nil {
		return nil, err
	}
	if err := unix.Setns(t.home, unix.CLONE_NEWNS); err != nil {
		f.Close()
		return nil, fmt.Errorf("back to kurmad's mount namespace: %w", err)
	}
	return f, nil
}

// populateView sets up the netns dir of the view the calling thread is in.
// The dir's mount is made private first: what is mounted on it stays in
// the view even when the namespace the view copies is not the container's
// as it should be (an agent whose main thread ended up in a view of its
// own, what /proc names as its namespace) and holds a peer of the host's
// netns dir there.
func populateView(job viewJob) error {
	dir := job.dir
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("netns dir private: %w", err)
	}
	if job.whole >= 0 {
		if err := unix.MoveMount(job.whole, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("netns dir: %w", err)
		}
		return nil
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("netns dir: %w", err)
	}
	for i, name := range job.shown {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o444); err != nil {
			return err
		}
		if err := unix.MoveMount(job.trees[i], "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("netns dir read-only: %w", err)
	}
	return nil
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
