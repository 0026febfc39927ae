package networkpod

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// clone3Gate is kurmad's side of a plugin container's seccomp filter. The
// filter cannot read clone3's flags (they are in memory), so it cannot tell
// a clone3 asking for a new user namespace from any other: every plugin
// process's clone3 must fail (with ENOSYS, so that libc falls back to
// clone, whose flags the filter checks). But the exec agent starts each
// call's processes with clone3, straight into the call's cgroup. In the
// agent's filter, which every call inherits, clone3 is therefore a user
// notification, and this gate answers it: a thread of the agent goes on,
// anyone else gets ENOSYS. It runs in kurmad, not in the agent: a Go
// process cannot answer its own notifications (the thread blocked in
// clone3 holds its scheduler slot, and a stop-the-world would wait for it
// while the answering goroutine waits for the world).
type clone3Gate struct {
	agentPid int // the agent's host PID
	// agentFd is a pidfd of the agent, -1 when it was gone before the gate
	// started (then every clone3 is refused).
	agentFd int
	log     logrus.FieldLogger

	mu       sync.Mutex
	closers  []interface{ Close() error }
	stopped  bool
	done     chan struct{}
	answered [2]uint64 // let through, refused
}

// startClone3Gate answers listener, the agent's seccomp listener (it came
// with the watch's state), until the filter has no process left, or stop.
// pidfd is the agent's (the gate keeps a copy of its own).
func startClone3Gate(listener *os.File, agentPid int, pidfd *os.File, log logrus.FieldLogger) *clone3Gate {
	g := &clone3Gate{agentPid: agentPid, agentFd: -1, log: log, done: make(chan struct{})}
	if fd, err := unix.FcntlInt(pidfd.Fd(), unix.F_DUPFD_CLOEXEC, 0); err == nil {
		g.agentFd = fd
	} else {
		log.WithError(err).Warn("exec agent's pidfd: the agent's clone3 will be refused too")
	}
	go g.run(listener)
	return g
}

// stop closes the listener and waits until the gate's goroutine returned.
// The agent keeps its own copy, for the next kurmad: until one answers,
// its clone3 waits (it starts nothing while no kurmad calls it).
func (g *clone3Gate) stop() {
	g.mu.Lock()
	g.stopped = true
	for _, c := range g.closers {
		_ = c.Close()
	}
	g.mu.Unlock()
	<-g.done
}

// hold registers c to be closed by stop; false (and c closed) when stop
// already ran.
func (g *clone3Gate) hold(c interface{ Close() error }) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		_ = c.Close()
		return false
	}
	g.closers = append(g.closers, c)
	return true
}

func (g *clone3Gate) run(l *os.File) {
	defer close(g.done)
	if g.agentFd >= 0 {
		defer unix.Close(g.agentFd)
	}
	if !g.hold(l) {
		return
	}
	if err := g.serve(l); err != nil && !errors.Is(err, os.ErrClosed) && !g.isStopped() {
		g.log.WithError(err).Warn("answering the exec agent's seccomp notifications")
	}
}

// isStopped tells whether stop ran: the listener's read then fails with
// the poller's "use of closed file", which os.ErrClosed does not match, and
// is no fault (a Detach, at every kurmad restart, stops every gate).
func (g *clone3Gate) isStopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped
}

// The kernel's struct seccomp_notif and seccomp_notif_resp
// (linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  struct {
		Nr   int32
		Arch uint32
		IP   uint64
		Args [6]uint64
	}
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// seccompIoctlNotifIDValid is SECCOMP_IOCTL_NOTIF_ID_VALID, _IOW('!', 2, __u64).
const seccompIoctlNotifIDValid = 0x40082102

// serve answers notifications on l until the filter has no process left
// (the kernel then reports a hang-up) or l is closed.
func (g *clone3Gate) serve(l *os.File) error {
	rc, err := l.SyscallConn()
	if err != nil {
		return err
	}
	for {
		var (
			n       seccompNotif
			got     bool
			hangup  bool
			recvErr error
		)
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if k, err := unix.Poll(pfd, 0); err != nil || k == 0 {
				return false // nothing yet (EINTR: try again)
			}
			if pfd[0].Revents&unix.POLLIN == 0 {
				hangup = pfd[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
				return hangup
			}
			// A notification is pending: RECV will not block.
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); e != 0 {
				if e != unix.ENOENT && e != unix.EINTR { // ENOENT: the caller was killed meanwhile
					recvErr = e
				}
				return true
			}
			got = true
			return true
		})
		switch {
		case err != nil:
			return err
		case hangup:
			return nil
		case recvErr != nil:
			return fmt.Errorf("SECCOMP_IOCTL_NOTIF_RECV: %w", recvErr)
		case got:
			g.answer(rc, &n)
		}
	}
}

// answer lets a thread of the agent go on and fails anyone else's call
// with ENOSYS. The notifying thread is blocked in the call, so its ID
// cannot be reused before the answer; NOTIF_ID_VALID after the check
// makes sure it was not killed and replaced in between.
func (g *clone3Gate) answer(rc interface {
	Control(func(uintptr)) error
}, n *seccompNotif) {
	agent := g.isAgentThread(n.Pid)
	resp := seccompNotifResp{ID: n.ID, Error: -int32(unix.ENOSYS)}
	if agent {
		resp = seccompNotifResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	}
	_ = rc.Control(func(fd uintptr) {
		id := n.ID
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, seccompIoctlNotifIDValid, uintptr(unsafe.Pointer(&id))); e != 0 {
			return
		}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))); e != 0 {
			return // ENOENT: the caller was killed
		}
		g.mu.Lock()
		if agent {
			g.answered[0]++
		} else {
			g.answered[1]++
		}
		g.mu.Unlock()
	})
}

// isAgentThread tells whether tid is a thread of the agent. The task dir
// alone could be a stranger's once the agent has died and been reaped: a
// plugin may kill the agent (same uid, CAP_KILL) and fork until one of its
// processes gets the agent's PID, before kurmad tears the container down.
// The agent's pidfd, checked after the task dir, says the PID still is
// the agent's (alive, or dead but not reaped, which keeps the PID from
// reuse), so the task seen was the agent's.
func (g *clone3Gate) isAgentThread(tid uint32) bool {
	if g.agentFd < 0 {
		return false
	}
	if _, err := os.Lstat(fmt.Sprintf("/proc/%d/task/%d", g.agentPid, tid)); err != nil {
		return false
	}
	return unix.PidfdSendSignal(g.agentFd, 0, nil, 0) == nil
}

// counts says how many clone3 calls the gate let through (the agent's)
// and refused (everyone else's).
func (g *clone3Gate) counts() (let, refused uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.answered[0], g.answered[1]
}

// socketPair is a connected pair of unix stream sockets, close-on-exec.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "agent-setup"), os.NewFile(uintptr(fds[1]), "agent-setup"), nil
}
