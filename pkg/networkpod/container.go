package networkpod

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	// Device rules of the containers' cgroups (cgroup v1 devices
	// controller, or eBPF on v2) need this manager registered: kurma-init
	// applies them, kurmad removes them with the container.
	_ "github.com/opencontainers/cgroups/devices"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// Paths inside every plugin container.
const (
	// agentBin is the read-only bind mount of the kurma-agent binary: the
	// exec agent (`serve`), the container's init, and through it the main
	// executable's start (`exec`, which installs the seccomp filter and
	// executes the main).
	agentBin = "/.kurma-agent"
	// pluginStateDir is where <StateDir>/networks/<name> is mounted:
	// host-local's default data dir.
	pluginStateDir = "/var/lib/cni"
	// defaultPath is the PATH given when the image sets none.
	defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// containerKey names one generation of a network's container in
// everything derived from it: its libcontainer id, run dir and cgroup.
// Network names never hold a '+' (and libcontainer ids, directory and
// cgroup names allow it), so no two (network, generation) pairs share a
// key: "net.1" generation 2 is "net.1+2", "net" generation 12 "net+12".
func containerKey(network string, generation int) string {
	return network + "+" + strconv.Itoa(generation)
}

// containerID is the libcontainer id of the container with that key.
func containerID(key string) string { return "kurma-net-" + key }

// defaultCgroupParent keeps the production name readable and gives every
// other run dir (tests, a second daemon) its own cgroup subtree, so that
// stale-container cleanup never touches containers it does not own.
func defaultCgroupParent(runDir string) string {
	if runDir == "/run/kurma" {
		return "kurma"
	}
	sum := sha256.Sum256([]byte(runDir))
	return "kurma-" + hex.EncodeToString(sum[:4])
}

func (h *Host) containersRoot() string { return filepath.Join(h.opts.RunDir, "containers") }

// networkRunDir is <RunDir>/networks/<key>: overlay dirs and the agent's
// socket dir of one container. Nothing under it is mounted into the
// container but the overlay's merged dir as its root.
func (h *Host) networkRunDir(key string) string {
	return filepath.Join(h.opts.RunDir, "networks", key)
}

func (h *Host) agentHostDir(key string) string {
	return filepath.Join(h.networkRunDir(key), "agent")
}

// agentSocket is where kurmad binds the socket it passes to the agent and
// dials for every call: on the host only, never mounted in the container.
func (h *Host) agentSocket(key string) string {
	return filepath.Join(h.agentHostDir(key), "sock")
}

func (h *Host) overlayDir(key string) string {
	return filepath.Join(h.networkRunDir(key), "overlay")
}

// pluginStateHostDir is the network's /var/lib/cni, one for all its
// generations: IPAM leases and libcni's cache outlive a container, and a
// del run by an older generation finds what a newer one's adds left
// beside its own.
func (h *Host) pluginStateHostDir(network string) string {
	return filepath.Join(h.opts.StateDir, "networks", network)
}

// imageEnv is the image's environment with a PATH when it has none.
func imageEnv(env []string) []string {
	out := append([]string(nil), env...)
	for _, kv := range out {
		if strings.HasPrefix(kv, "PATH=") {
			return out
		}
	}
	return append(out, defaultPath)
}

// containerConfig is the libcontainer config of a network's container whose
// root filesystem is mounted at rootfs, with capability set caps.
func (h *Host) containerConfig(spec Spec, rootfs string, caps []string) *configs.Config {
	devs := containerDevices()
	limits := effectiveLimits(spec.Limits)
	return &configs.Config{
		Rootfs:          rootfs,
		RootPropagation: unix.MS_SLAVE | unix.MS_REC,
		Capabilities: &configs.Capabilities{
			Bounding: caps, Effective: caps, Permitted: caps, Inheritable: caps, Ambient: caps,
		},
		// Own mount, PID, IPC and cgroup namespaces: the plugins work on
		// the host's network, and share its UTS (so no Hostname; the
		// seccomp filter refuses sethostname and setdomainname). In the
		// host's IPC namespace CAP_SYS_ADMIN could remove or reconfigure
		// any System V IPC object of the host, and root attach root's
		// shared memory; no plugin needs it (/dev/shm is the
		// container's own anyway). The cgroup namespace is rooted at the
		// container's cgroup: the agent's call cgroups are made through it
		// (agent.OpenCallGroups).
		Namespaces: configs.Namespaces([]configs.Namespace{
			{Type: configs.NEWNS},
			{Type: configs.NEWPID},
			{Type: configs.NEWIPC},
			{Type: configs.NEWCGROUP},
		}),
		Cgroups: &cgroups.Cgroup{
			Path:      "/" + h.opts.CgroupParent + "/" + containerID(spec.key()),
			Resources: containerResources(limits, deviceRules(devs)),
		},
		Rlimits:       memlockRlimit(),
		Devices:       devs,
		Mounts:        append(h.containerMounts(spec, limits), h.kubernetesMounts(spec)...),
		MaskPaths:     maskedPaths(),
		ReadonlyPaths: readonlyPaths(spec),
	}
}

// containerMounts are the mounts of a network's containers over their
// root filesystem.
func (h *Host) containerMounts(spec Spec, limits gendef.Limits) []*configs.Mount {
	const defaultMountFlags = unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV
	mounts := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: defaultMountFlags},
		{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=65536k"},
		{Source: "devpts", Destination: "/dev/pts", Device: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: defaultMountFlags, Data: "mode=1777,size=65536k"},
	}
	mounts = append(mounts, sysMounts()...)
	mounts = append(mounts, []*configs.Mount{
		{Source: "tmpfs", Destination: "/tmp", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: tmpfsData("1777", limits.Tmpfs)},
		{Source: "tmpfs", Destination: "/run", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: tmpfsData("755", limits.Tmpfs)},
		h.netnsMount(spec.MainSeesPods),
		{Source: h.pluginStateHostDir(spec.Network), Destination: pluginStateDir, Device: "bind", Flags: unix.MS_BIND | unix.MS_REC | unix.MS_NOSUID | unix.MS_NODEV},
		{Source: h.opts.AgentPath, Destination: agentBin, Device: "bind", Flags: unix.MS_BIND | unix.MS_RDONLY},
	}...)
	if fi, err := os.Stat("/lib/modules"); err == nil && fi.IsDir() {
		mounts = append(mounts, &configs.Mount{
			Source: "/lib/modules", Destination: "/lib/modules", Device: "bind",
			Flags: unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY,
		})
	}
	return mounts
}

// netnsMount is the container's netns dir, at the same path as on the
// host: with seePods, the host's, read-only (a plugin cannot plant entries
// for kurmad to find) and rslave so that namespaces bind-mounted there
// later show up inside; else an empty read-only tmpfs. Either way each
// call sees only the namespaces its arguments name (callview.go).
func (h *Host) netnsMount(seePods bool) *configs.Mount {
	if seePods {
		return &configs.Mount{
			Source: h.NetnsDir(), Destination: h.NetnsDir(), Device: "bind",
			Flags:            unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY,
			PropagationFlags: []int{unix.MS_SLAVE | unix.MS_REC},
		}
	}
	return &configs.Mount{
		Source: "tmpfs", Destination: h.NetnsDir(), Device: "tmpfs",
		Flags: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, Data: "mode=755,size=4k",
	}
}

// mountOverlay mounts the image's rootfs read-only under a fresh
// per-container upper layer of at most size bytes (a tmpfs of its own:
// a plugin filling it fills neither the run dir's filesystem nor more
// than its memory limit, whose pages these are) and returns the merged
// dir.
func (h *Host) mountOverlay(key, lower string, size int64) (string, error) {
	dir := h.overlayDir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpfsData("700", size)); err != nil {
		return "", fmt.Errorf("mount the writable layer's tmpfs on %s: %w", dir, err)
	}
	upper, work, merged := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
	}
	for _, d := range []string{lower, upper, work} {
		if strings.ContainsAny(d, ",:") {
			return "", fmt.Errorf("overlay: path %q contains ',' or ':'", d)
		}
	}
	data := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, data); err != nil {
		return "", fmt.Errorf("mount overlay on %s: %w", merged, err)
	}
	return merged, nil
}

// removeNetworkRunDir unmounts whatever is still mounted under the
// container's run dir (overlay merged dir, in any order) and removes it.
func (h *Host) removeNetworkRunDir(key string) error {
	dir := h.networkRunDir(key)
	if err := unmountUnder(dir); err != nil {
		return err
	}
	// The container's mount namespace (holding the overlay) may outlive
	// its last process by a moment, and the overlay may still write its
	// work dir: retry briefly.
	var err error
	for i := range 20 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	for range 8 {
		points, err := mountPointsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		for i := len(points) - 1; i >= 0; i-- {
			if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unmount %s: %w", points[i], err)
			}
		}
	}
	return fmt.Errorf("mounts under %s keep coming back", dir)
}

// mountPointsUnder lists mount points at or below dir in mountinfo order.
func mountPointsUnder(dir string) ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(infos))
	for _, m := range infos {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// ensureSharedNetnsDir makes <RunDir>/netns a shared mount point (a bind
// mount onto itself), once: later netns mounts there propagate into every
// container, which holds an rslave copy.
func (h *Host) ensureSharedNetnsDir() error {
	dir := h.NetnsDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	isMount, shared, err := mountState(dir)
	if err != nil {
		return err
	}
	if !isMount {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
	}
	if !shared {
		if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("make %s shared: %w", dir, err)
		}
	}
	return nil
}

// mountState tells whether dir is a mount point and whether its (last)
// mount is shared.
func mountState(dir string) (isMount, shared bool, err error) {
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != dir, false
	})
	if err != nil || len(infos) == 0 {
		return false, false, err
	}
	last := infos[len(infos)-1]
	return true, slices.ContainsFunc(strings.Fields(last.Optional), func(f string) bool {
		return strings.HasPrefix(f, "shared:")
	}), nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies' roots
// (/sys/fs/cgroup/<controller> on v1 and hybrid hosts, /sys/fs/cgroup on v2).
func cgroupHierarchies() []string {
	if cgroups.IsCgroup2UnifiedMode() {
		return []string{"/sys/fs/cgroup"}
	}
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// cgroupPids returns the pids in a plugin container's cgroups and the
// calls' cgroups under them, in every hierarchy, whoever made them.
func (h *Host) cgroupPids(key string) []int { return pidsUnder(h.containerCgroupDirs(key)) }

// cgroupTree lists dir and the cgroups below it, parents first.
func cgroupTree(dir string) []string {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	out := []string{dir}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, cgroupTree(filepath.Join(dir, e.Name()))...)
		}
	}
	return out
}

// removeCgroupParent removes the plugin containers' shared cgroup parent in every
// hierarchy when it is empty. It must only run while no generation is being
// started: after cleaning up an earlier run, and after Stop.
func (h *Host) removeCgroupParent() error {
	var errs []error
	for _, hier := range cgroupHierarchies() {
		err := unix.Rmdir(filepath.Join(hier, h.opts.CgroupParent))
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove cgroup parent: %w", err))
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup dir; EBUSY right after the last process
// exited is transient.
func rmdirRetry(dir string) error {
	var err error
	for i := range 50 {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(time.Duration(i+1) * 2 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

// destroyContainer kills every process of the container with that key
// (current or left by an earlier daemon), destroys its libcontainer state,
// cgroups and mounts, and removes its run dir. It is idempotent.
func (h *Host) destroyContainer(key string, c *libcontainer.Container) error {
	var errs []error
	if c == nil {
		loaded, err := libcontainer.Load(h.containersRoot(), containerID(key))
		if err == nil {
			c = loaded
		} else if !errors.Is(err, libcontainer.ErrNotExist) {
			// Unreadable state: kill by cgroup below and remove the dir.
			h.log.WithError(err).WithField("container", containerID(key)).Warn("cannot load stale container state; cleaning up by hand")
		}
	}
	if c != nil {
		// SIGKILL to the init of a PID namespace kills all its processes.
		_ = c.Signal(unix.SIGKILL)
	}
	// Whatever is left in its cgroups, when they are provably this
	// Host's (ownership.go): another kurmad's are left alone.
	id := containerID(key)
	own, foreign := h.ownCgroups(key)
	if err := killAndWait(pidsUnder(own), 5*time.Second); err != nil {
		errs = append(errs, fmt.Errorf("container %s: %w", id, err))
	}
	if c != nil {
		if err := destroyRetry(c); err != nil {
			errs = append(errs, fmt.Errorf("container %s: destroy: %w", id, err))
		}
	}
	if err := os.RemoveAll(filepath.Join(h.containersRoot(), id)); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroupTrees(own); err != nil {
		errs = append(errs, fmt.Errorf("container %s: %w", id, err))
	}
	if inUse := h.releaseForeign(key, foreign); len(inUse) > 0 {
		h.log.WithField("cgroups", strings.Join(inUse, ",")).Warn("leaving a cgroup of this container's name: processes this kurmad did not start hold it")
	}
	if err := h.removeNetworkRunDir(key); err != nil {
		errs = append(errs, fmt.Errorf("container %s: %w", id, err))
	}
	return errors.Join(errs...)
}

// destroyRetry destroys a container whose processes were just killed:
// libcontainer refuses while it still sees the init running.
func destroyRetry(c *libcontainer.Container) error {
	var err error
	for i := range 100 {
		if err = c.Destroy(); err == nil {
			return nil
		}
		time.Sleep(time.Duration(min(i+1, 10)) * 5 * time.Millisecond)
	}
	return err
}

// killAndWait SIGKILLs pids and waits until they are gone (reaped; a zombie
// still counts as present).
func killAndWait(pids []int, limit time.Duration) error {
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	deadline := time.Now().Add(limit)
	for _, pid := range pids {
		for processExists(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d survived SIGKILL", pid)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

// processExists tells whether pid is alive: a zombie counts as gone (it
// holds no resources, and its parent may be a host init that never reaps).
func processExists(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
