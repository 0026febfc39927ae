package uninstall

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/api"
)

// stopTimeout bounds kurmad's stop: it waits up to 30 s for requests and
// then stops its plugin containers (the unit gives it 90 s).
const stopTimeout = 2 * time.Minute

// stop stops kurmad: the process that answers on the socket, told by the
// socket itself (SO_PEERCRED), never by a name. It gets SIGUSR2, the stop
// of an uninstall: SIGTERM, a restart's, would leave its plugin containers
// running for a next kurmad (docs/operations.md). Under systemd its unit
// is disabled first (else it would start again at the next boot); kurmad
// exits 0, which Restart=on-failure does not restart. It returns once
// kurmad exited: its plugin containers stopped and its mounts gone.
func (u *run) stop(ctx context.Context, info api.Info) error {
	pid, err := peerPid(u.o.Socket)
	if err != nil {
		return fmt.Errorf("cannot tell kurmad's process from its socket %s: %w", u.o.Socket, err)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return fmt.Errorf("kurmad's process %d: %w", pid, err)
	}
	if name := strings.TrimSpace(string(comm)); name != "kurmad" {
		return fmt.Errorf("the process answering on %s is %d (%s), not kurmad: stop kurmad yourself, then run kurmactl uninstall again", u.o.Socket, pid, name)
	}
	unit := systemdUnit(pid)
	how := fmt.Sprintf("kurmad (pid %d)", pid)
	if unit != "" {
		how = fmt.Sprintf("kurmad (pid %d, systemd unit %s, disabled)", pid, unit)
	}
	if u.o.DryRun {
		u.say("would stop %s", how)
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("kurmad's process %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if unit != "" {
		out, err := exec.CommandContext(ctx, "systemctl", "disable", unit).CombinedOutput()
		if err != nil {
			return fmt.Errorf("systemctl disable %s: %w: %s", unit, err, out)
		}
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGUSR2, nil, 0); err != nil {
		return fmt.Errorf("stop kurmad (pid %d): %w", pid, err)
	}
	// The pidfd turns readable when the process exits: no polling.
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(stopTimeout/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for kurmad (pid %d) to exit: %w", pid, err)
		}
		if n == 0 {
			return fmt.Errorf("kurmad (pid %d) did not exit within %s of its SIGUSR2: see its log", pid, stopTimeout)
		}
		break
	}
	u.say("stopped %s", how)
	return nil
}

// peerPid is the pid of the process listening on the unix socket sock.
func peerPid(sock string) (int, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("the peer is in another pid namespace")
	}
	return int(cred.Pid), nil
}

// systemdUnit is the service unit whose main process pid is
// ("kurmad.service"), "" when none: a unit its cgroup path names, that
// systemd says runs pid as its MainPID. A kurmad started by hand in
// another service's cgroup (a shell's, a test's) is not that service.
func systemdUnit(pid int) string {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return ""
	}
	unit := serviceOf(pid)
	if unit == "" {
		return ""
	}
	out, err := exec.Command("systemctl", "show", "--property", "MainPID", "--value", unit).Output()
	if err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(pid) {
		return ""
	}
	return unit
}

// serviceOf is the *.service its cgroup path names, "" when none.
func serviceOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		// hierarchy:controllers:path, as "0::/system.slice/kurmad.service".
		f := strings.SplitN(l, ":", 3)
		if len(f) < 3 {
			continue
		}
		for _, part := range strings.Split(f[2], "/") {
			if strings.HasSuffix(part, ".service") {
				return part
			}
		}
	}
	return ""
}
