package k8snode

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Shared is the outcome of MakeShared for one directory.
type Shared struct {
	Dir string
	// Mount is the mount point whose propagation the directory has.
	Mount string
	// Made says what MakeShared did: "" (it was shared already),
	// "make-shared" (Mount was Dir, made shared), "bind" (Dir bound on
	// itself, then made shared).
	Made string
}

// MakeShared makes each of dirs (created when missing) lie on a shared
// mount in the mount namespace at nsPath, as the runtime needs for a
// Bidirectional or HostToContainer hostPath: systemd makes / shared at
// boot, but a node without it (or any mount between) has them private,
// and containerd and CRI-O then refuse the pod. Where a directory's mount
// is not shared, the directory is bound on itself and that mount made
// shared, as iproute2 does for /run/netns. nsPath is the runtime's mount
// namespace: for a hostPID pod, its parent's (the runtime's shim), whose
// paths are the ones hostPath volumes name.
func MakeShared(nsPath string, dirs []string) ([]Shared, error) {
	type result struct {
		out []Shared
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// setns(CLONE_NEWNS) needs a thread that shares no fs_struct:
		// unshare it on a thread of our own, which dies with this
		// goroutine (never unlocked), so no other goroutine runs in the
		// host's mount namespace. (Should it be the main thread, Go parks
		// it for good instead: /proc/self then shows that namespace.)
		runtime.LockOSThread()
		out, err := makeSharedIn(nsPath, dirs)
		ch <- result{out, err}
	}()
	r := <-ch
	return r.out, r.err
}

func makeSharedIn(nsPath string, dirs []string) ([]Shared, error) {
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("the runtime's mount namespace: %w", err)
	}
	defer ns.Close()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, fmt.Errorf("unshare(CLONE_FS): %w", err)
	}
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("entering the mount namespace %s: %w", nsPath, err)
	}
	// setns made the namespace's root this thread's root and cwd: paths
	// below are the node's.
	var out []Shared
	for _, dir := range dirs {
		s, err := makeDirShared(dir)
		if err != nil {
			return out, fmt.Errorf("%s: %w", dir, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func makeDirShared(dir string) (Shared, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Shared{}, err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return Shared{}, err
	}
	mp, shared, err := mountOf(real)
	if err != nil {
		return Shared{}, err
	}
	s := Shared{Dir: real, Mount: mp}
	if shared {
		return s, nil
	}
	s.Made = "make-shared"
	if mp != real {
		if err := unix.Mount(real, real, "", unix.MS_BIND, ""); err != nil {
			return s, fmt.Errorf("bind mount on itself: %w", err)
		}
		s.Made, s.Mount = "bind", real
	}
	if err := unix.Mount("", real, "", unix.MS_SHARED, ""); err != nil {
		return s, fmt.Errorf("making %s shared: %w", real, err)
	}
	return s, nil
}

// mountOf returns the mount point of the mount path resolves to, and
// whether that mount is shared, from this thread's mountinfo. The mount is
// found by its ID (fdinfo's mnt_id of path opened O_PATH), not by the
// longest mount point that is a prefix of path: that may be a mount
// hidden under another one mounted later on a parent directory.
func mountOf(path string) (string, bool, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	info, err := os.ReadFile(fmt.Sprintf("/proc/thread-self/fdinfo/%d", fd))
	if err != nil {
		return "", false, err
	}
	id := -1
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			if id, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return "", false, fmt.Errorf("the fdinfo of %s: mnt_id %q", path, v)
			}
		}
	}
	if id < 0 {
		return "", false, fmt.Errorf("no mnt_id in the fdinfo of %s", path)
	}
	// This thread's mountinfo: /proc/self's is the main thread's, in
	// another mount namespace (see MakeShared).
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	infos, err := mountinfo.GetMountsFromReader(f, func(m *mountinfo.Info) (skip, stop bool) {
		return m.ID != id, m.ID == id
	})
	if err != nil {
		return "", false, err
	}
	if len(infos) == 0 {
		return "", false, fmt.Errorf("mount %d of %s is not in mountinfo", id, path)
	}
	m := infos[0]
	return m.Mountpoint, slices.ContainsFunc(strings.Fields(m.Optional), func(f string) bool {
		return strings.HasPrefix(f, "shared:")
	}), nil
}
