package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
)

// CPU time is the measure that the other engineers' compilers on the same
// cores do not distort: wall-clock latencies grow with the load average,
// the CPU an operation burns does not (much).

// selfAndChildrenCPU is the bench process's own CPU plus that of every
// child it reaped (a plugin libcni ran, and the plugins that one reaped).
func selfAndChildrenCPU() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

func childrenCPU() time.Duration {
	var kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	return tv(kids.Utime) + tv(kids.Stime)
}

func tv(t unix.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}

// processCPU is utime+stime of pid (all its threads) from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	// utime is field 14, stime 15.
	return statCPU(pid, 14, "utime/stime")
}

// statCPU sums the two clock-tick fields of /proc/<pid>/stat that start
// at field (numbered as proc(5) does), named what in errors.
func statCPU(pid, field int, what string) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may contain spaces) in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	at := field - 3
	if len(f) < at+2 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	a, err1 := strconv.ParseInt(f[at], 10, 64)
	b2, err2 := strconv.ParseInt(f[at+1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad %s", pid, what)
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(a+b2) * time.Second / hz, nil
}

// cgroupCPU is the CPU used so far by everything in runDir's kurmad cgroup
// subtree (the plugin containers: exec agents, cni-wrapper, plugins).
func cgroupCPU(runDir string) (time.Duration, error) {
	parent := testutil.CgroupParent(runDir)
	for _, h := range testutil.CgroupHierarchies() {
		if b, err := os.ReadFile(filepath.Join(h, parent, "cpuacct.usage")); err == nil {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(ns), err
		}
		if b, err := os.ReadFile(filepath.Join(h, parent, "cpu.stat")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
					us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					return time.Duration(us) * time.Microsecond, err
				}
			}
		}
	}
	return 0, fmt.Errorf("no cpuacct.usage or cpu.stat for cgroup %s", parent)
}

// daemonCPU is kurmad's own CPU plus its plugin containers'.
func daemonCPU(d *daemon) (own, containers time.Duration, err error) {
	if own, err = processCPU(d.Pid()); err != nil {
		return 0, 0, err
	}
	containers, err = cgroupCPU(d.RunDir)
	return own, containers, err
}

// reapedCPU is utime+stime of the children pid has reaped (cutime and
// cstime of /proc/<pid>/stat): the mkfs.ext4 kurmad ran, for one.
func reapedCPU(pid int) (time.Duration, error) {
	// cutime is field 16, cstime 17.
	return statCPU(pid, 16, "cutime/cstime")
}

// childrenNamed lists the live children of pid whose command is comm.
func childrenNamed(pid int, comm string) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); err == nil && strings.TrimSpace(string(c)) == comm {
				out = append(out, child)
			}
		}
	}
	return out
}

// bootCPU is the CPU a boot of d has cost so far: kurmad's own and that of
// the children it reaped (mkfs.ext4), kurma-init's own, and its plugin
// containers' cgroup subtree's since containersBefore (cgroupCPU read
// before the start; the runc stages run there once libcontainer placed
// them). What kurma-init reaped is left out: its runc stages are in the
// containers' cgroups already.
func bootCPU(d *daemon, containersBefore time.Duration) (time.Duration, error) {
	pid := d.Pid()
	own, err := processCPU(pid)
	if err != nil {
		return 0, err
	}
	reaped, err := reapedCPU(pid)
	if err != nil {
		return 0, err
	}
	total := own + reaped
	for _, init := range childrenNamed(pid, "kurma-init") {
		if c, err := processCPU(init); err == nil {
			total += c
		}
	}
	containers, err := cgroupCPU(d.RunDir)
	if err != nil {
		return 0, err
	}
	return total + containers - containersBefore, nil
}
