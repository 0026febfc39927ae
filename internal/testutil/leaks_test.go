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

// A Kurmad owns the processes that name a path under its dir or run in its
// plugin containers' cgroups, not those of a dir whose name begins with
// its own: a leak check never sees (nor Cleanup kills) another test's.
func TestKurmadOwnsOnlyItsOwn(t *testing.T) {
	k, err := NewKurmad("/bin/false", filepath.Join(t.TempDir(), "kte-12"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewKurmad("/bin/false", k.Dir+"3")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		who, cmdline, cgroup string
		want                 bool
	}{
		{"its kurmad", "kurmad --config " + k.Config + " --socket " + k.Socket, "0::/", true},
		{"a child naming its pod's netns", "/proc/self/exe cnitest-hang-child " + k.RunDir + "/netns/p1 p1", "0::/", true},
		{"a call in its cgroup", "/opt/network/add", "4:freezer:/" + CgroupParent(k.RunDir) + "/kurma-net-a+1/call-1", true},
		{"the other kurmad", "kurmad --config " + other.Config + " --socket " + other.Socket, "0::/", false},
		{"the other's child", "/proc/self/exe cnitest-hang-child " + other.RunDir + "/netns/p1 p1", "0::/", false},
		{"a call in the other's cgroup", "/opt/network/add", "4:freezer:/" + CgroupParent(other.RunDir) + "/kurma-net-a+1/call-1", false},
	} {
		if got := k.owns(tt.cmdline, tt.cgroup); got != tt.want {
			t.Errorf("%s (%q, %q): owns = %v, want %v", tt.who, tt.cmdline, tt.cgroup, got, tt.want)
		}
	}
}
