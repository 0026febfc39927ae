package agent

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// A call's processes are found three ways, because each alone misses some:
//
//   - the process tree under the call's first process (ppid links): catches
//     children that left the process group with setsid, even when they hold
//     only pipes the call made internally (cni-wrapper → plugin → daemon);
//   - the call's process group: catches what the tree walk saw too late;
//   - the holders of the call's stdout/stderr pipes: catches anything still
//     able to hold the call open, however it got there.
//
// The tree is recorded while the call runs (trackEvery), not only at kill
// time: a child whose parent exited is reparented to the agent (a child
// subreaper) and its ppid no longer leads back to the call.
const trackEvery = 50 * time.Millisecond

// procStat is what the kill logic needs of /proc/<pid>/stat.
type procStat struct {
	pid, ppid, pgid int
}

// listProcs lists the live processes (zombies excluded) other than self.
// Inside a plugin container's PID namespace there are only a handful, so a
// scan costs well under a millisecond.
func listProcs(self int) []procStat {
	entries, _ := os.ReadDir("/proc")
	out := make([]procStat, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

func readStat(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	return procStat{pid: pid, ppid: ppid, pgid: pgid}, true
}

// callTree is the set of processes seen belonging to one call. A call
// started by fork/exec has one root (its first process); one served
// in-process has one root per plugin process it started. Each root leads
// its own process group. Fields are guarded by Server.mu.
type callTree struct {
	roots map[int]bool
	seen  map[int]bool
	// pipes are the /proc fd names of the stdout/stderr pipes the call's
	// processes were given; their read ends stay open until the call ends
	// (files), so the inode numbers cannot be reused meanwhile.
	pipes map[string]bool
	files []*os.File
	// dead is set when the call is killed: nothing more may be started.
	dead bool
}

func newCallTree() *callTree {
	return &callTree{roots: map[int]bool{}, seen: map[int]bool{}, pipes: map[string]bool{}}
}

func (t *callTree) addRoot(pid int) {
	t.roots[pid] = true
	t.seen[pid] = true
}

// grow adds to the tree every process in procs whose parent is in it or
// that is in one of the call's process groups, until nothing new turns up.
func (t *callTree) grow(procs []procStat) {
	for changed := true; changed; {
		changed = false
		for _, p := range procs {
			if !t.seen[p.pid] && (t.seen[p.ppid] || t.roots[p.pgid]) {
				t.seen[p.pid] = true
				changed = true
			}
		}
	}
}

// track records the call's tree every trackEvery until done is closed.
func (s *Server) track(t *callTree, done <-chan struct{}) {
	tick := time.NewTicker(trackEvery)
	defer tick.Stop()
	self := os.Getpid()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		procs := listProcs(self)
		s.mu.Lock()
		t.grow(procs)
		s.mu.Unlock()
	}
}

// orphanOf reports whether p, a child of the agent, belongs to the call
// tree t: it was seen in t, or it is not a call's root process and t is
// the only call running (an orphan made between two scans).
func (s *Server) orphanOf(t *callTree, p procStat, self int) bool {
	if p.ppid != self {
		return false
	}
	if t.seen[p.pid] {
		return true
	}
	if _, isRoot := s.roots[p.pid]; isRoot {
		return false
	}
	return len(s.calls) == 1
}
