package testutil

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// What the leak checks of the end-to-end tests, the soak test and the
// bench look for, in one place.

// MountsUnder lists the mount points at or below dir, deepest last.
func MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// UnmountUnder lazily unmounts everything at or below dir.
func UnmountUnder(dir string) {
	for range 3 { // stacked mounts need more than one pass
		ms := MountsUnder(dir)
		if len(ms) == 0 {
			return
		}
		for i := len(ms) - 1; i >= 0; i-- {
			_ = unix.Unmount(ms[i], unix.MNT_DETACH)
		}
	}
}

// CgroupParent is the networking pod's cgroup parent for a run dir other
// than /run/kurma; pkg/networkpod's tests check it matches the real one.
func CgroupParent(runDir string) string {
	sum := sha256.Sum256([]byte(runDir))
	return "kurma-" + hex.EncodeToString(sum[:4])
}

// CgroupHierarchies lists the mounted cgroup hierarchies' roots
// (/sys/fs/cgroup/<controller> on v1 and hybrid hosts, /sys/fs/cgroup on v2).
func CgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// HostLocalLeases lists host-local's IP files under dir (any depth):
// everything in a networks/<name>/ directory but its lock and
// last_reserved_ip files.
func HostLocalLeases(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		if filepath.Base(filepath.Dir(filepath.Dir(p))) != "networks" {
			return nil
		}
		base := e.Name()
		if base == "lock" || strings.HasPrefix(base, "last_reserved_ip") {
			return nil
		}
		if strings.Count(base, ".") == 3 || strings.Contains(base, ":") { // an IPv4 or IPv6 address
			out = append(out, p)
		}
		return nil
	})
	return out
}
