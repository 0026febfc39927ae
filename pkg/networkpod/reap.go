package networkpod

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// reapLeakedRuncChildren reaps libcontainer's intermediate processes that
// libcontainer itself leaves as zombies of kurmad when starting a process
// fails (runc v1.3.3 setnsProcess.execSetns returns on a failed stage-0
// without waiting for stage-1 and stage-2). That is not only a leak: a
// zombie stage-2 ("runc:[2:INIT]") sits in the container's PID namespace,
// and the namespace's init cannot finish exiting until it is reaped, so the
// init's Wait would hang for ever. It happened when the agent was started
// by a setns process just as the main (then the init) exited; the agent is
// now the init and kurmad starts no setns process, so this stays only as a
// safety net for a failed start or teardown of the init.
//
// Only zombies (already dead), only our own children, only those two
// names, and only by pid: never wait4(-1), which would steal exit statuses
// from libcontainer and os/exec. In the success path libcontainer reaps
// stage-1 itself and ignores the error if someone else did first; stage-2
// is then alive (and renamed by exec).
func reapLeakedRuncChildren() {
	self := os.Getpid()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + p.Name() + "/status")
		if err != nil {
			continue
		}
		var name, state string
		ppid := -1
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "Name":
				name = v
			case "State":
				state = v
			case "PPid":
				ppid, _ = strconv.Atoi(v)
			}
		}
		if ppid != self || !strings.HasPrefix(state, "Z") || (name != "runc:[1:CHILD]" && name != "runc:[2:INIT]") {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}
