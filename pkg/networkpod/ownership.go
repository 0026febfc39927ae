package networkpod

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Which plugin containers are this Host's. Two kurmads on one kernel (the
// nodes of a test cluster, nested nodes) may share a cgroup parent: with
// the default one when both use /run/kurma in mount namespaces of their
// own, or by their cgroup_parent. A container is this Host's when its run
// dir holds it (libcontainer's state, the container's run dir) and its
// cgroup is the very one this Host made: the identity (inode) of each of
// its cgroup directories, recorded in its run dir once libcontainer made
// them, matches. Everything else under the parent is another's, or can no
// longer be told from another's: kurmad kills nothing in it and removes
// it only when it is empty; and a container whose cgroup path another's
// populated cgroup holds does not start (ErrCgroupInUse).

// ErrCgroupInUse means a network's container cannot start: processes that
// this kurmad did not start hold its cgroup (another kurmad with the same
// cgroup parent runs a network of that name).
var ErrCgroupInUse = errors.New("the container's cgroup is in use by processes this kurmad did not start")

// cgroupRecord is the file, in the container's run dir, holding the
// identity of its cgroup directories.
func (h *Host) cgroupRecord(key string) string {
	return filepath.Join(h.networkRunDir(key), "cgroups.json")
}

// containerCgroupDirs are the container's cgroup directories, one per
// hierarchy that has it.
func (h *Host) containerCgroupDirs(key string) []string {
	var out []string
	for _, hier := range cgroupHierarchies() {
		dir := filepath.Join(hier, h.opts.CgroupParent, containerID(key))
		if _, err := os.Stat(dir); err == nil {
			out = append(out, dir)
		}
	}
	return out
}

// recordCgroups records the identity of the container's cgroup
// directories, which libcontainer made when it started the container.
func (h *Host) recordCgroups(key string) error {
	ids := map[string]uint64{}
	for _, dir := range h.containerCgroupDirs(key) {
		ino, err := inode(dir)
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		ids[dir] = ino
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	if err := os.WriteFile(h.cgroupRecord(key), b, 0o600); err != nil {
		return fmt.Errorf("recording the container's cgroups: %w", err)
	}
	return nil
}

// ownCgroups splits the container's cgroup directories into those the
// record in this Host's run dir proves are its own and the others.
func (h *Host) ownCgroups(key string) (own, foreign []string) {
	var ids map[string]uint64
	if b, err := os.ReadFile(h.cgroupRecord(key)); err == nil {
		_ = json.Unmarshal(b, &ids)
	}
	for _, dir := range h.containerCgroupDirs(key) {
		if want, ok := ids[dir]; ok {
			if got, err := inode(dir); err == nil && got == want {
				own = append(own, dir)
				continue
			}
		}
		foreign = append(foreign, dir)
	}
	return own, foreign
}

// cgroupsHold reports whether pid is in one of the cgroups dirs or below.
// It reads the dirs' own process lists first, where a container's init
// (its agent) is, and walks the trees (pidsUnder) only when none lists
// pid: an adoption checks 20 networks' agents this way, and the walks of
// every hierarchy's tree were most of its time.
func cgroupsHold(dirs []string, pid int) bool {
	for _, d := range dirs {
		if slices.Contains(procsOf(d), pid) {
			return true
		}
	}
	return slices.Contains(pidsUnder(dirs), pid)
}

// procsOf returns the pids cgroup dir itself holds (not those below).
func procsOf(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// pidsUnder returns the pids in the cgroups dirs and below.
func pidsUnder(dirs []string) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		for _, dir := range cgroupTree(d) {
			for _, pid := range procsOf(dir) {
				if !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

// removeCgroupTrees removes dirs and the cgroups below them (the calls'
// cgroups a killed agent left), deepest first. The shared parent stays:
// removing it here raced with another network's container being created
// under it (libcontainer makes the parent, then writes cpuset files into
// it); removeCgroupParent removes it when no container can be created.
func removeCgroupTrees(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		tree := cgroupTree(d)
		for i := len(tree) - 1; i >= 0; i-- {
			if err := rmdirRetry(tree[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// releaseForeign removes the foreign cgroup directories of a container
// that hold no process (a crash of this kurmad before it recorded them
// leaves such; an empty one is nobody's loss), and says which still hold
// processes: those are another's, and left alone.
func (h *Host) releaseForeign(key string, foreign []string) (inUse []string) {
	for _, d := range foreign {
		if len(pidsUnder([]string{d})) > 0 {
			inUse = append(inUse, d)
			continue
		}
		if err := removeCgroupTrees([]string{d}); err != nil && !errors.Is(err, unix.EBUSY) {
			h.log.WithError(err).WithField("cgroup", d).Warn("removing an empty cgroup this kurmad cannot tell is its own")
		}
	}
	return inUse
}

// checkCgroupFree fails with ErrCgroupInUse when processes this Host did
// not start hold the cgroup a container of key would run in.
func (h *Host) checkCgroupFree(key string) error {
	_, foreign := h.ownCgroups(key)
	if inUse := h.releaseForeign(key, foreign); len(inUse) > 0 {
		return fmt.Errorf("%w: cgroup /%s/%s, in %d hierarchies such as %s (another kurmad with the cgroup parent %q? give each its own cgroup_parent)",
			ErrCgroupInUse, h.opts.CgroupParent, containerID(key), len(inUse), strings.TrimSuffix(inUse[0], "/"+h.opts.CgroupParent+"/"+containerID(key)), h.opts.CgroupParent)
	}
	return nil
}

func inode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
