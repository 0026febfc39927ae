package networkpod

import (
	"fmt"
	"strconv"

	"github.com/opencontainers/cgroups"
	devices "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// defaultLimits are the bounds of a network whose config sets none
// (docs/security.md, "Bounds"): room for a daemon like flanneld, the exec
// agent and a few dozen concurrent calls, each a few Go processes of a few
// threads, and nothing near what one plugin could take from the host.
var defaultLimits = gendef.Limits{
	Pids:          1024,
	Memory:        1 << 30,
	CallPids:      256,
	CallMemory:    512 << 20,
	Tmpfs:         64 << 20,
	WritableLayer: 256 << 20,
	StateDir:      64 << 20,
}

// DefaultLimits returns the bounds of a network whose config sets none
// (see defaultLimits).
func DefaultLimits() gendef.Limits { return defaultLimits }

// memlockLimit is RLIMIT_MEMLOCK in a plugin container (no plugin holds
// CAP_IPC_LOCK): what locked memory a plugin may have, within its memory
// limit anyway.
const memlockLimit = 8 << 20

// effectiveLimits is l with every zero field at its default.
func effectiveLimits(l gendef.Limits) gendef.Limits {
	fill := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&l.Pids, defaultLimits.Pids)
	fill(&l.Memory, defaultLimits.Memory)
	fill(&l.CallPids, defaultLimits.CallPids)
	fill(&l.CallMemory, defaultLimits.CallMemory)
	fill(&l.Tmpfs, defaultLimits.Tmpfs)
	fill(&l.WritableLayer, defaultLimits.WritableLayer)
	fill(&l.StateDir, defaultLimits.StateDir)
	return l
}

// containerResources are the container cgroup's bounds: its devices, its
// tasks and its memory (page cache and tmpfs pages included).
func containerResources(l gendef.Limits, devRules []*devices.Rule) *cgroups.Resources {
	r := &cgroups.Resources{Devices: devRules}
	if l.Pids > 0 {
		r.PidsLimit = l.Pids
	}
	if l.Memory > 0 {
		r.Memory = l.Memory
	}
	return r
}

// memlockRlimit is the container's RLIMIT_MEMLOCK: memlockLimit, or
// kurmad's own when lower (raising it would need CAP_SYS_RESOURCE).
func memlockRlimit() []configs.Rlimit {
	var cur unix.Rlimit
	lim := uint64(memlockLimit)
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &cur) == nil && cur.Max < lim {
		lim = cur.Max
	}
	return []configs.Rlimit{{Type: unix.RLIMIT_MEMLOCK, Hard: lim, Soft: lim}}
}

// tmpfsData is the mount data of a tmpfs of mode and size bytes (no size
// when unlimited).
func tmpfsData(mode string, size int64) string {
	if size <= 0 {
		return "mode=" + mode
	}
	return "mode=" + mode + ",size=" + strconv.FormatInt(size, 10)
}

// callLimitArgs are the exec agent's flags for each call's limits.
func callLimitArgs(l gendef.Limits) []string {
	var out []string
	if l.CallMemory > 0 {
		out = append(out, "-call-memory="+strconv.FormatInt(l.CallMemory, 10))
	}
	if l.CallPids > 0 {
		out = append(out, "-call-pids="+strconv.FormatInt(l.CallPids, 10))
	}
	return out
}

// limitNote is what kurmad adds to a call's stderr for each limit it hit.
func limitNote(l gendef.Limits, hit string) string {
	switch hit {
	case "memory":
		return fmt.Sprintf("\n[kurma: the call reached its memory limit (%d MiB, limits.call_memory): the OOM killer ended a process of it]\n", l.CallMemory>>20)
	case "pids":
		return fmt.Sprintf("\n[kurma: the call reached its task limit (%d, limits.call_pids): a fork or thread start failed]\n", l.CallPids)
	}
	return fmt.Sprintf("\n[kurma: the call reached its %s limit]\n", hit)
}
