package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// A mount point whose path has a space (mountinfo writes it as \040) is
// found under its real name, and UnmountUnder removes it.
func TestMountsUnderUnescapes(t *testing.T) {
	RequireRoot(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "with space", "and\ttab")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if got := MountsUnder(dir); !slices.Equal(got, []string{mnt}) {
		t.Fatalf("MountsUnder(%q) = %q, want [%q]", dir, got, mnt)
	}
	if got := MountsUnder(filepath.Join(dir, "with")); len(got) != 0 {
		t.Errorf("MountsUnder of a name prefix, not a parent: %q", got)
	}
	UnmountUnder(dir)
	if got := MountsUnder(dir); len(got) != 0 {
		t.Errorf("after UnmountUnder: %q", got)
	}
}
