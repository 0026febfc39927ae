package netnsfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// BindExisting bind-mounts, at path (which must not exist), a network
// namespace someone else made: a container runtime's, named by src as
// runtimes name them (/proc/<pid>/ns/net, /run/netns/cni-…, /var/run/netns/…;
// symlinks are followed, since /proc/<pid>/ns/net is one). src must be a
// network namespace other than kurmad's own (ErrNotPodNetns otherwise).
// The mount holds the namespace, so it lives on after the runtime lets it
// go, until Unbind; nothing inside it is changed.
func BindExisting(src, path string) error {
	return BindExistingAs(src, path, ID{})
}

// CheckExisting returns nil when src names a network namespace that
// BindExisting would accept, and otherwise why not (ErrNotPodNetns, or a
// path that does not exist).
func CheckExisting(src string) error {
	f, err := openExisting(src)
	if err != nil {
		return err
	}
	return f.Close()
}

// openExisting opens src, following symlinks, and checks that it is a
// network namespace other than kurmad's own.
func openExisting(src string) (*os.File, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", src, err)
	}
	if err := checkNsfs(int(f.Fd())); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns %s: %w", src, err)
	}
	if err := checkPodNetns(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns %s: %w", src, err)
	}
	return f, nil
}

// Unbind removes a bind mount BindExisting made, and its file, and
// nothing else: unlike Remove it deletes no link, for the namespace is
// still its maker's. A path that is not mounted or does not exist is not
// an error; a symlink there is removed itself, never followed.
func Unbind(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns %s: unmount: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}
