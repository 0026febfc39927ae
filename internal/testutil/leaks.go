package testutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// What the leak checks of the end-to-end tests, the soak test and the
// bench look for, in one place.

// MountsUnder lists the mount points at or below dir, deepest last, read
// with the same parser as networkpod's (moby/sys/mountinfo, which
// unescapes "\040" and friends).
func MountsUnder(dir string) []string {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(infos))
	for _, m := range infos {
		out = append(out, m.Mountpoint)
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

// CgroupParent is the plugin host's cgroup parent for a run dir other
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

// cgroupDirs lists every directory of the cgroup subtree parent in every
// hierarchy, parents first.
func cgroupDirs(parent string) []string {
	var out []string
	for _, h := range CgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, parent), func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// removeCgroups kills whatever still runs in the cgroup subtree parent and
// removes its directories, deepest first.
func removeCgroups(parent string) error {
	dirs := cgroupDirs(parent)
	for _, d := range dirs {
		data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		// A killed process leaves its cgroup a moment after the signal.
		err := Poll(context.Background(), time.Second, "removing "+dirs[i], func() error {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// process is a live process: its pid and command line (NULs as spaces).
type process struct {
	pid     int
	cmdline string
}

func (p process) String() string { return fmt.Sprintf("pid %d: %s", p.pid, p.cmdline) }

// listProcesses lists live processes (not this one, not zombies) for which
// match, given the command line and /proc/<pid>/cgroup, is true.
func listProcesses(match func(cmdline, cgroup string) bool) []process {
	procs, _ := os.ReadDir("/proc")
	var out []process
	self := os.Getpid()
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "stat")); isZombie(stat) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		cl := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		cg, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cgroup"))
		if match(cl, string(cg)) {
			out = append(out, process{pid, cl})
		}
	}
	return out
}

// ProcessesWhere lists live processes (not this one, not zombies) for
// which match, given the command line (NULs as spaces) and
// /proc/<pid>/cgroup, is true, as "pid N: <command line>".
func ProcessesWhere(match func(cmdline, cgroup string) bool) []string {
	var out []string
	for _, p := range listProcesses(match) {
		out = append(out, p.String())
	}
	return out
}

// PIDsWhere is the PIDs of the processes ProcessesWhere(match) lists.
func PIDsWhere(match func(cmdline, cgroup string) bool) []int {
	var out []int
	for _, p := range listProcesses(match) {
		out = append(out, p.pid)
	}
	return out
}

// KillProcessesWhere SIGKILLs every process ProcessesWhere(match) lists and
// waits until they are gone (or zombies), failing naming those still there
// after 5s.
func KillProcessesWhere(match func(cmdline, cgroup string) bool) error {
	for _, p := range listProcesses(match) {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	return Poll(context.Background(), 5*time.Second, "killed processes to end", func() error {
		if left := ProcessesWhere(match); len(left) > 0 {
			return fmt.Errorf("still running: %s", strings.Join(left, "; "))
		}
		return nil
	})
}

// isZombie tells from /proc/<pid>/stat whether the process is a zombie.
func isZombie(stat []byte) bool {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// RemoveTornLeases removes the host-local lease files under dir that hold
// no owner and returns them. host-local reserves an address by creating its
// file (O_EXCL) and only then writing the container ID and ifname into it
// (plugins v1.9.1, backend/disk Reserve): a plugin killed between the two
// leaves an empty file that no DEL (and no GC) can match. A test that kills
// plugin calls at random instants (kill -9 of kurmad makes the exec agents
// kill every call in flight) removes these before its leak check, so that
// the check still catches every lease a pod owns.
func RemoveTornLeases(dir string) []string {
	var torn []string
	for _, p := range HostLocalLeases(dir) {
		if fi, err := os.Stat(p); err == nil && fi.Size() == 0 {
			if os.Remove(p) == nil {
				torn = append(torn, p)
			}
		}
	}
	return torn
}
