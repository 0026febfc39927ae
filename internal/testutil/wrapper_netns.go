package testutil

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// NewNetnsFile creates a network namespace bind-mounted at path (a file that
// must not exist yet, normally in t.TempDir()) and removes it when t ends.
// Nothing of the namespace stays on any OS thread of the test: it is created
// on a locked thread that then exits.
func NewNetnsFile(t testing.TB, path string) string {
	t.Helper()
	if err := createNetnsFile(path); err != nil {
		t.Fatalf("creating netns %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := RemoveNetnsFile(path); err != nil {
			t.Errorf("removing netns %s: %v", path, err)
		}
	})
	return path
}

func createNetnsFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread moved to the new namespace dies with
		// this goroutine instead of going back to the scheduler.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind mount: %w", err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// RemoveNetnsFile unmounts and deletes a netns made by NewNetnsFile; a path
// already gone is not an error.
func RemoveNetnsFile(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
