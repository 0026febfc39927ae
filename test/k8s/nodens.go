package k8stest

// The namespaces of an N-node cluster's nodes (see the package doc): a
// holder process per node keeps the node's network, mount and cgroup
// namespaces, and everything the node runs enters them with nsenter after
// joining the node's cgroup in every hierarchy.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// holderEnv carries a holder's spec (JSON) to the re-executed program.
const holderEnv = "KURMA_K8S_NODE_HOLDER"

// hierarchy is one cgroup mount under /sys/fs/cgroup.
type hierarchy struct {
	Mount string // where it is mounted: /sys/fs/cgroup/memory
	Type  string // cgroup or cgroup2
	Opts  string // its super options less rw, for a fresh mount: "memory", "xattr,name=systemd"
	Own   string // this process's cgroup in it, as a directory: /sys/fs/cgroup/memory/process_api/x
}

// cgroupHierarchies lists the cgroup hierarchies mounted under
// /sys/fs/cgroup, with this process's cgroup in each.
func cgroupHierarchies() ([]hierarchy, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	type mount struct {
		point, root, fstype string
		opts                []string
	}
	var mounts []mount
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		if !strings.HasPrefix(f[4], "/sys/fs/cgroup") {
			continue
		}
		var opts []string
		for _, o := range strings.Split(g[2], ",") {
			if o != "rw" && o != "ro" {
				opts = append(opts, o)
			}
		}
		mounts = append(mounts, mount{point: f[4], root: f[3], fstype: g[0], opts: opts})
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var out []hierarchy
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		controllers, path := parts[1], parts[2]
		found := false
		for _, m := range mounts {
			if controllers == "" {
				if m.fstype != "cgroup2" {
					continue
				}
			} else if m.fstype != "cgroup" || !containsAll(m.opts, strings.Split(controllers, ",")) {
				continue
			}
			rel, err := filepath.Rel(m.root, path)
			if err != nil || strings.HasPrefix(rel, "..") {
				return nil, fmt.Errorf("cgroup %s of hierarchy %q is outside its mount %s (root %s)", path, controllers, m.point, m.root)
			}
			out = append(out, hierarchy{Mount: m.point, Type: m.fstype, Opts: strings.Join(m.opts, ","), Own: filepath.Join(m.point, rel)})
			found = true
			break
		}
		if !found {
			return nil, fmt.Errorf("no mount under /sys/fs/cgroup for cgroup hierarchy %q (this process is in %s)", controllers, path)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy mounted under /sys/fs/cgroup")
	}
	return out, nil
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// makeCgroup makes dir (relative to this process's cgroup) in every
// hierarchy, level by level, and returns the directories it made, deepest
// last. A new cpuset cgroup gets its parent's CPUs and memory nodes (v1
// leaves them empty, and an empty cpuset takes no process).
func makeCgroup(hs []hierarchy, dir string) (made []string, err error) {
	for _, h := range hs {
		p := h.Own
		for _, part := range strings.Split(dir, "/") {
			parent := p
			p = filepath.Join(p, part)
			if err := os.Mkdir(p, 0o755); err != nil {
				if errors.Is(err, os.ErrExist) {
					continue
				}
				return made, fmt.Errorf("making cgroup %s: %w", p, err)
			}
			made = append(made, p)
			if h.Type == "cgroup" && strings.Contains(","+h.Opts+",", ",cpuset,") {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return made, err
					}
					if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
						return made, fmt.Errorf("cgroup %s: %s: %w", p, f, err)
					}
				}
			}
		}
	}
	return made, nil
}

// removeCgroups removes the cgroup directories at or below dirs, deepest
// first: what a node's kubelet, containerd and kurmad made below its
// cgroup goes with it. Missing ones are not an error.
func removeCgroups(dirs []string) (found []string, errs []error) {
	var all []string
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
	}
	sort.Slice(all, func(i, j int) bool { return strings.Count(all[i], "/") > strings.Count(all[j], "/") })
	for _, d := range all {
		if err := unix.Rmdir(d); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
			continue
		}
		found = append(found, d)
	}
	return found, errs
}

// joinScript is the shell that puts itself in the cgroups listed in
// $KT_CGROUP_PROCS (cgroup.procs files) and then runs its arguments.
const joinScript = `for f in $KT_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; exec "$@"`

// holderSpec is what a node's holder mounts in the node's mount namespace.
type holderSpec struct {
	Node string
	// Binds are bind-mounted, source on target.
	Binds [][2]string
	// Cgroups are mounted afresh under /sys/fs/cgroup (on a fresh sysfs, of
	// the node's network namespace), showing the node's cgroup as the root.
	Cgroups []hierarchy
}

// runHolder is the holder, running in the node's new namespaces (see
// startHolder): it makes the node's mounts, says "ready" on stdout, and
// exits when stdin closes (the cluster's teardown, or its death).
func runHolder(specJSON string) {
	var spec holderSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Printf("error: the holder's spec: %v\n", err)
		os.Exit(1)
	}
	if err := spec.mount(); err != nil {
		fmt.Printf("error: node %s: %v\n", spec.Node, err)
		os.Exit(1)
	}
	// The node's hostname is its name, as a kind node's: what a
	// hostNetwork pod answers when asked (the e2e suite's
	// endpoints-using-hostNetwork tests expect the node's name).
	if err := unix.Sethostname([]byte(spec.Node)); err != nil {
		fmt.Printf("error: node %s: sethostname: %v\n", spec.Node, err)
		os.Exit(1)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		fmt.Printf("error: node %s: ip link set lo up: %v: %s\n", spec.Node, err, out)
		os.Exit(1)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

func (s holderSpec) mount() error {
	var targets []string
	for _, b := range s.Binds {
		targets = append(targets, b[1])
	}
	// The namespace starts with copies of the host's mounts: those below
	// the node's paths are the host's business.
	if err := unmountBelow(append([]string{"/run"}, targets...)); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on /run: %w", err)
	}
	for _, b := range s.Binds {
		if err := unix.Mount(b[0], b[1], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", b[0], b[1], err)
		}
	}
	// sysfs shows the network namespace of whoever mounted it
	// (/sys/class/net): the node's own, with its cgroups below.
	if err := unix.Mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount sysfs on /sys: %w", err)
	}
	if err := unix.Mount("tmpfs", "/sys/fs/cgroup", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on /sys/fs/cgroup: %w", err)
	}
	for _, h := range s.Cgroups {
		if err := os.MkdirAll(h.Mount, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("cgroup", h.Mount, h.Type, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, h.Opts); err != nil {
			return fmt.Errorf("mount %s (%s) on %s: %w", h.Type, h.Opts, h.Mount, err)
		}
	}
	return nil
}

// holder is a running node holder.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int
	// procs are the node cgroup's cgroup.procs files, one per hierarchy.
	procs []string
}

// startHolder starts the holder of node spec.Node in cgroup dir (one
// directory per hierarchy): it joins the cgroup, unshares the network,
// mount, cgroup and UTS namespaces (util-linux unshare: a Go program cannot
// enter a new mount namespace once its threads run), and runs this
// program again as the holder. It returns once the holder is ready.
func startHolder(spec holderSpec, cgroupDirs []string, logPath string) (*holder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	h := &holder{}
	for _, d := range cgroupDirs {
		h.procs = append(h.procs, filepath.Join(d, "cgroup.procs"))
	}
	cmd := exec.Command("sh", "-c", joinScript, "sh",
		"unshare", "--mount", "--net", "--cgroup", "--uts", "--propagation", "private", "--", exe)
	cmd.Env = append(os.Environ(), holderEnv+"="+string(b), "KT_CGROUP_PROCS="+strings.Join(h.procs, " "))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := start(cmd); err != nil {
		return nil, fmt.Errorf("node %s: starting its holder: %w", spec.Node, err)
	}
	h.cmd, h.pid = cmd, cmd.Process.Pid
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		h.stop()
		return nil, fmt.Errorf("node %s: its holder did not start: %q; its log:\n%s", spec.Node, strings.TrimSpace(line), tailFile(logPath, 20))
	}
	return h, nil
}

// stop ends the holder (it exits when its stdin closes) and waits for it.
func (h *holder) stop() {
	h.stdin.Close()
	_ = wait(h.cmd)
}

// command runs name in the node: in its cgroup, then in its namespaces.
func (h *holder) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("sh", append([]string{"-c", joinScript, "sh",
		"nsenter", "--target", strconv.Itoa(h.pid), "--mount", "--net", "--cgroup", "--uts", "--", name}, args...)...)
	cmd.Env = append(os.Environ(), "KT_CGROUP_PROCS="+strings.Join(h.procs, " "))
	return cmd
}
