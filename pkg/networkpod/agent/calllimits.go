package agent

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Per-call limits: each call's cgroup carries a memory and a task limit of
// its own, within its container's, so that one call cannot take the memory
// or the tasks the other calls and the main executable need. They are set
// where the host's cgroup v1 memory and pids hierarchies hold the
// controllers (v1 and hybrid hosts): the forking thread joins the call's
// cgroups there for the fork, as for the v1 freezer. On a host whose v2
// hierarchy holds them, the container's own limits bound its calls
// together (a v2 cgroup with processes, as the container's is, cannot give
// its children controllers). What a call hits is reported in its answer
// (Response.LimitsHit).
//
// This file is the whole of the per-call limits: premade call cgroups
// would carry the same files.

// CallLimits bound each call; 0 leaves that bound to the container's.
type CallLimits struct {
	Memory int64 // bytes
	Pids   int64 // tasks: processes and threads
}

// limitHierarchy is a cgroup v1 hierarchy in which each call's cgroup
// carries a limit.
type limitHierarchy struct {
	name  string // the controller: memory or pids
	dir   int    // the container's cgroup in it
	file  string // the limit's file
	value string
}

// setCallLimits opens, on pm's thread, the v1 hierarchies that carry l
// (memory, pids) the way OpenCallGroups opens the freezer's; it returns,
// for the log, the limits this host cannot give each call.
func (gs *CallGroups) setCallLimits(pm *privateMounts, l CallLimits) (unsupported []string, err error) {
	for _, c := range []struct {
		name, file string
		v          int64
	}{{"memory", "memory.limit_in_bytes", l.Memory}, {"pids", "pids.max", l.Pids}} {
		if c.v <= 0 {
			continue
		}
		if !ownV1Controller(c.name) {
			unsupported = append(unsupported, c.name)
			continue
		}
		if err := checkOwnCgroupIsRoot(c.name); err != nil {
			return nil, err
		}
		fd, err := pm.mount("cgroup", c.name)
		if err != nil {
			return nil, fmt.Errorf("open the container's %s cgroup: %w", c.name, err)
		}
		unix.CloseOnExec(fd)
		gs.limits = append(gs.limits, limitHierarchy{name: c.name, dir: fd, file: c.file, value: strconv.FormatInt(c.v, 10)})
	}
	return unsupported, nil
}

// ownV1Controller tells whether the process is in a cgroup v1 hierarchy
// of controller.
func ownV1Controller(controller string) bool {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			return true
		}
	}
	return false
}

// createLimits makes the call's cgroup named name in each limit hierarchy,
// with its limit.
func (gs *CallGroups) createLimits(name string) ([]int, error) {
	var fds []int
	for _, h := range gs.limits {
		if err := unix.Mkdirat(h.dir, name, 0o700); err != nil && err != unix.EEXIST {
			gs.removeLimits(name, fds)
			return nil, fmt.Errorf("make call %s cgroup: %w", h.name, err)
		}
		fd, err := unix.Openat(h.dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = writeAt(fd, h.file, []byte(h.value))
			if err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			_ = unix.Unlinkat(h.dir, name, unix.AT_REMOVEDIR)
			gs.removeLimits(name, fds)
			return nil, fmt.Errorf("call %s limit: %w", h.name, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// removeLimits removes the call's limit cgroups, empty by now.
func (gs *CallGroups) removeLimits(name string, fds []int) {
	for i, fd := range fds {
		unix.Close(fd)
		_ = unix.Unlinkat(gs.limits[i].dir, name, unix.AT_REMOVEDIR)
	}
}

// joinLimits moves the calling (locked) thread into the call's limit
// cgroups; leaveLimits moves it back.
func (g *callGroup) joinLimits(tid []byte) error {
	for i, fd := range g.limitFds {
		if err := writeAt(fd, "tasks", tid); err != nil {
			return fmt.Errorf("join call %s cgroup: %w", g.gs.limits[i].name, err)
		}
	}
	return nil
}

func (g *callGroup) leaveLimits(tid []byte) error {
	for _, h := range g.gs.limits {
		if err := writeAt(h.dir, "tasks", tid); err != nil {
			return err
		}
	}
	return nil
}

// limitsHit lists the limits the call reached: "memory" when the OOM killer
// killed one of its processes, "pids" when a fork failed at its limit.
func (g *callGroup) limitsHit() []string {
	var out []string
	for i, fd := range g.limitFds {
		var file, key string
		switch g.gs.limits[i].name {
		case "memory":
			file, key = "memory.oom_control", "oom_kill"
		case "pids":
			file, key = "pids.events", "max"
		}
		data, err := readAt(fd, file)
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			f := bytes.Fields(line)
			if len(f) == 2 && string(f[0]) == key && string(f[1]) != "0" {
				out = append(out, g.gs.limits[i].name)
			}
		}
	}
	return out
}
