package k8stest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kernelState is what the cluster may add to the machine outside its
// mount namespace: links in the host's network namespace, nftables tables
// and cgroup directories.
type kernelState struct {
	Links   map[string]bool
	Tables  map[string]string // "family name" → its listing
	Cgroups map[string]bool
	// MadeDirs are the mount points the cluster created on the host.
	MadeDirs []string
	// Hub: an N-node cluster, whose links and tables are in its own
	// network namespaces (and go with them): nothing to compare.
	Hub bool
	// CgroupDirs are an N-node cluster's cgroup, one per hierarchy, which
	// holds its nodes'.
	CgroupDirs []string
	// WorkDir is the cluster's directory, removed unless KeepWorkDir.
	WorkDir     string
	KeepWorkDir bool
}

func snapshotKernel() (*kernelState, error) {
	s := &kernelState{Links: map[string]bool{}, Tables: map[string]string{}, Cgroups: map[string]bool{}}
	links, err := linkNames()
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		s.Links[l] = true
	}
	tables, err := nftTables()
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if s.Tables[t], err = nftTable(t); err != nil {
			return nil, err
		}
	}
	for _, d := range cgroupDirs() {
		s.Cgroups[d] = true
	}
	return s, nil
}

func linkNames() ([]string, error) {
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

func nftTables() ([]string, error) {
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %v: %s", err, out)
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables, nil
}

// sameRules says whether two listings of a table (nftTable) hold the same
// rules: packet and byte counters move with any traffic, and nft prints a
// rule iptables-nft made (with a leading space, under a warning) unlike
// the same rule loaded back from its listing, so a table that only
// counted packets is not "changed", and is not deleted and reloaded
// (which would lose its counters, and iptables-nft's form, for whoever
// owns it).
func sameRules(a, b string) bool { return rulesOnly(a) == rulesOnly(b) }

var counterRE = regexp.MustCompile(`counter packets \d+ bytes \d+`)

func rulesOnly(listing string) string {
	var out []string
	for _, l := range strings.Split(listing, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "# Warning:") {
			continue
		}
		out = append(out, counterRE.ReplaceAllString(l, "counter"))
	}
	return strings.Join(out, "\n")
}

// nftTable is the listing of table t ("family name"), which nft -f takes
// back.
func nftTable(t string) (string, error) {
	f := strings.Fields(t)
	out, err := exec.Command("nft", "list", "table", f[0], f[1]).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft list table %s: %v: %s", t, err, out)
	}
	return string(out), nil
}

// cgroupDirs lists every cgroup directory of every hierarchy under
// /sys/fs/cgroup.
func cgroupDirs() []string {
	var out []string
	roots, _ := os.ReadDir("/sys/fs/cgroup")
	for _, r := range roots {
		root := filepath.Join("/sys/fs/cgroup", r.Name())
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && p != root {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// newSince lists what the machine has now that it did not have at s, and
// removes it (links, tables, empty cgroups, deepest first). It returns
// what it found, for the report.
func (s *kernelState) cleanNew() (found []string, errs []error) {
	links, err := linkNames()
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if s.Links[l] {
			continue
		}
		found = append(found, "link "+l)
		if out, err := exec.Command("ip", "link", "del", l).CombinedOutput(); err != nil {
			// A veth's peer went with the first end.
			if _, serr := os.Stat("/sys/class/net/" + l); serr == nil {
				errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", l, err, bytes.TrimSpace(out)))
			}
		}
	}
	tables, err := nftTables()
	if err != nil {
		errs = append(errs, err)
	}
	for _, t := range tables {
		before, existed := s.Tables[t]
		if existed {
			// A table another test left (CNI's cni_hostport, say) that
			// the cluster's plugins added rules to: back as it was.
			if now, err := nftTable(t); err != nil || sameRules(now, before) {
				continue
			}
			found = append(found, "rules in nftables table "+t+" (restored)")
		} else {
			found = append(found, "nftables table "+t)
		}
		f := strings.Fields(t)
		if out, err := exec.Command("nft", "delete", "table", f[0], f[1]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete table %s: %v: %s", t, err, bytes.TrimSpace(out)))
			continue
		}
		if existed {
			cmd := exec.Command("nft", "-f", "-")
			cmd.Stdin = strings.NewReader(before)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("restoring nftables table %s: %v: %s", t, err, bytes.TrimSpace(out)))
			}
		}
	}
	var dirs []string
	for _, d := range cgroupDirs() {
		if !s.Cgroups[d] {
			dirs = append(dirs, d)
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		found = append(found, "cgroup "+d)
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	return found, errs
}

// descendants lists the processes below pid (children, theirs, ...).
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// comm is a process's name, for reports.
func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return fmt.Sprintf("%d %s", pid, s)
}

// killDescendants SIGKILLs every process below this one until none is
// left (up to timeout), reaping the orphans the subreaper inherited.
func killDescendants(timeout time.Duration) (killed []string, err error) {
	deadline := time.Now().Add(timeout)
	seen := map[int]bool{}
	for {
		ps := descendants(os.Getpid())
		reapOrphans()
		var alive []int
		for _, p := range ps {
			if isZombie(p) {
				continue
			}
			alive = append(alive, p)
		}
		if len(alive) == 0 {
			return killed, nil
		}
		for _, p := range alive {
			if !seen[p] {
				seen[p] = true
				killed = append(killed, comm(p))
			}
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("processes still alive after SIGKILL: %v", alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	rest := string(b[bytes.LastIndexByte(b, ')')+1:])
	f := strings.Fields(rest)
	return len(f) > 0 && f[0] == "Z"
}

// reapOrphans waits for the zombie children this process inherited as a
// subreaper; children it started with os/exec are reaped by their Wait
// (never a wait for any child: that would steal their status).
func reapOrphans() {
	for _, p := range descendants(os.Getpid()) {
		if ppidOf(p) != os.Getpid() || !isZombie(p) || ownChildren.has(p) {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
	}
}

func ppidOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	rest := string(b[bytes.LastIndexByte(b, ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// save writes s to path, for the parent process to clean up after a
// child that died without its teardown (see EnterNodeNamespace).
func (s *kernelState) save(path string) error {
	if path == "" {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// cleanAfter is the parent's teardown of a child that left its state file:
// under the kernel-test lock, what the cluster made in the kernel and the
// mount points it created (its mounts went with its namespace).
func cleanAfter(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	defer os.Remove(path)
	var s kernelState
	if err := json.Unmarshal(b, &s); err != nil {
		fmt.Fprintln(os.Stderr, "k8s-test: the cluster's kernel snapshot:", err)
		return
	}
	lock, err := os.OpenFile(KernelLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err == nil {
		defer lock.Close()
		_ = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
	}
	var found []string
	var errs []error
	if !s.Hub {
		found, errs = s.cleanNew()
	}
	cg, cerrs := removeCgroups(s.CgroupDirs)
	for _, d := range cg {
		found = append(found, "cgroup "+d)
	}
	errs = append(errs, cerrs...)
	for i := len(s.MadeDirs) - 1; i >= 0; i-- {
		if err := os.Remove(s.MadeDirs[i]); err == nil {
			found = append(found, "directory "+s.MadeDirs[i])
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if s.WorkDir != "" && !s.KeepWorkDir {
		if err := os.RemoveAll(s.WorkDir); err != nil {
			errs = append(errs, err)
		} else {
			found = append(found, "directory "+s.WorkDir)
		}
	}
	fmt.Fprintf(os.Stderr, "k8s-test: the test did not finish its teardown; removed after it: %s\n", strings.Join(found, ", "))
	for _, e := range errs {
		fmt.Fprintln(os.Stderr, "k8s-test: teardown:", e)
	}
}
