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
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz, nil
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
