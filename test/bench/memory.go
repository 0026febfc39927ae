package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// netMemory is what one idle network costs in memory: the PSS of its
// container's processes (the agent, the main executable) and the kernel
// memory its container's cgroup is charged. kurma-init is kurmad's, one
// for every start, and ends with it: no network's.
type netMemory struct {
	procs         int
	pss, kernelKB int64
}

// idleNetworkMemory measures every plugin container of d (each network's
// running generation) while no call runs: it reads the container cgroups
// under d's cgroup parent, in the memory hierarchy of cgroup v1 or v2.
func idleNetworkMemory(d *daemon) ([]netMemory, error) {
	var out []netMemory
	for _, dir := range d.CgroupDirs() {
		base := filepath.Base(dir)
		if !strings.HasPrefix(base, "kurma-net-") || !isMemoryCgroup(dir) {
			continue
		}
		m, err := cgroupMemory(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", base, err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no plugin container cgroup with a memory controller under %v", d.CgroupDirs())
	}
	return out, nil
}

// isMemoryCgroup reports whether dir is in a hierarchy that accounts
// memory (v1's memory controller, or v2 with memory enabled there).
func isMemoryCgroup(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "memory.usage_in_bytes")); err == nil {
		return true
	}
	_, err := os.Stat(filepath.Join(dir, "memory.current"))
	return err == nil
}

// cgroupMemory sums the PSS of the cgroup's processes and reads the
// cgroup's kernel memory.
func cgroupMemory(dir string) (netMemory, error) {
	var m netMemory
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return m, err
	}
	seen := map[int]bool{}
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return m, fmt.Errorf("cgroup.procs: %q", f)
		}
		seen[pid] = true
	}
	for pid := range seen {
		kb, err := pssKB(pid)
		if err != nil {
			continue // exited since: an idle container's processes do not
		}
		m.procs++
		m.pss += kb
	}
	m.kernelKB, err = kernelMemoryKB(dir)
	return m, err
}

// pssKB is a process's proportional set size from smaps_rollup.
func pssKB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("pid %d: no Pss line in smaps_rollup", pid)
}

// kernelMemoryKB is the kernel memory charged to a cgroup: v1's
// memory.kmem.usage_in_bytes, v2's "kernel" of memory.stat.
func kernelMemoryKB(dir string) (int64, error) {
	if data, err := os.ReadFile(filepath.Join(dir, "memory.kmem.usage_in_bytes")); err == nil {
		b, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		return b / 1024, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(line, []byte("kernel ")); ok {
			b, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
			return b / 1024, err
		}
	}
	return 0, fmt.Errorf("%s: memory.stat has no kernel line", dir)
}

// memoryRows are the idle-network memory rows of a boot with n networks:
// medians per network over ms.
func memoryRows(ms []netMemory) []row {
	if len(ms) == 0 {
		return nil
	}
	var pss, kern, total, procs []float64
	for _, m := range ms {
		pss = append(pss, float64(m.pss))
		kern = append(kern, float64(m.kernelKB))
		total = append(total, float64(m.pss+m.kernelKB))
		procs = append(procs, float64(m.procs))
	}
	mib := func(kb float64) string { return fmt.Sprintf("%.1f MiB", kb/1024) }
	return []row{
		{metric: fmt.Sprintf("memory per idle network: PSS of its %.0f processes (n=%d networks)", median(procs), len(ms)), p50: mib(median(pss))},
		{metric: fmt.Sprintf("memory per idle network: kernel memory of its cgroup (n=%d)", len(ms)), p50: mib(median(kern))},
		{metric: fmt.Sprintf("memory per idle network: PSS + kernel (n=%d)", len(ms)), p50: mib(median(total)), tgt: "stated"},
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
