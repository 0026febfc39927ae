package netnsfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ID identifies a namespace while it lives: the device and inode of its
// nsfs file (what `ls -iL /proc/<pid>/ns/net` shows). The kernel may give
// a freed namespace's inode to a new one, but not while anything holds the
// first: kurmad's bind mount of a runtime's namespace keeps its ID unique.
type ID struct {
	Dev, Ino uint64
}

// IsZero reports whether id identifies nothing (a record that has none).
func (id ID) IsZero() bool { return id == ID{} }

func (id ID) String() string { return fmt.Sprintf("%d:%d", id.Dev, id.Ino) }

// ErrNoNetns means a path names no namespace any more: nothing is there,
// or a file that is no namespace (a runtime's netns file left after it
// was unmounted, a plain file or directory).
var ErrNoNetns = errors.New("no namespace there")

// Identify returns the ID of the namespace path names, following symlinks
// as a runtime's path needs (/proc/<pid>/ns/net). The error wraps
// ErrNoNetns when path names none (see ErrNoNetns); any other error (a
// permission, an I/O error) says nothing about the namespace.
func Identify(path string) (ID, error) {
	// O_PATH: a FIFO planted there cannot block the open.
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return ID{}, fmt.Errorf("netns %s: %w", path, ErrNoNetns)
		}
		return ID{}, fmt.Errorf("netns %s: %w", path, err)
	}
	defer unix.Close(fd)
	return identifyFd(fd, path)
}

// identifyFd is Identify of an open file.
func identifyFd(fd int, path string) (ID, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return ID{}, fmt.Errorf("netns %s: %w", path, err)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return ID{}, fmt.Errorf("netns %s: %w", path, ErrNoNetns)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ID{}, fmt.Errorf("netns %s: %w", path, err)
	}
	return ID{Dev: st.Dev, Ino: st.Ino}, nil
}

// IdentifyMounted returns the ID of the pod network namespace mounted at
// path, checked as Open checks it (no symlink followed).
func IdentifyMounted(path string) (ID, error) {
	f, err := Open(path)
	if err != nil {
		return ID{}, err
	}
	defer f.Close()
	return identifyFd(int(f.Fd()), path)
}

// IdentifyExisting is CheckExisting that also returns the ID of the
// namespace src names.
func IdentifyExisting(src string) (ID, error) {
	f, err := openExisting(src)
	if err != nil {
		return ID{}, err
	}
	defer f.Close()
	return identifyFd(int(f.Fd()), src)
}

// ErrOtherNetns means a path names a namespace other than the one asked
// for.
var ErrOtherNetns = errors.New("names another namespace")

// BindExistingAs is BindExisting of the namespace want only: when src names
// another one by now (a runtime's path reused), nothing is mounted and the
// error wraps ErrOtherNetns. A zero want accepts any.
func BindExistingAs(src, path string, want ID) error {
	f, err := openExisting(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if !want.IsZero() {
		got, err := identifyFd(int(f.Fd()), src)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("netns %s: namespace %s, not %s: %w", src, got, want, ErrOtherNetns)
		}
	}
	return bindFile(f, src, path)
}

// bindFile bind-mounts the namespace open as f (named src in errors) at
// path, which must not exist.
func bindFile(f *os.File, src, path string) error {
	t, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	t.Close()
	// Through the descriptor: what is mounted is the namespace checked,
	// whatever src names by now.
	fdPath := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if err := unix.Mount(fdPath, path, "none", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("netns %s: bind mount of %s: %w", path, src, err)
	}
	return nil
}
