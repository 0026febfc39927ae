package networkpod

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
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

// startClone3Gate receives the agent's seccomp listener on sock (kurmad's
// end of the socket pair whose other end the agent holds as its fd 4) and
// answers it until the filter has no process left, or stop. An agent that
// sends none (its filter has no notification) leaves the gate idle. The
// caller must not have reaped the agent yet (its PID is still the agent's).
func startClone3Gate(sock *os.File, agentPid int, log logrus.FieldLogger) *clone3Gate {
	g := &clone3Gate{agentPid: agentPid, agentFd: -1, log: log, done: make(chan struct{})}
	if fd, err := unix.PidfdOpen(agentPid, 0); err == nil { // close-on-exec
		g.agentFd = fd
	} else {
		log.WithError(err).Warn("exec agent's pidfd: the agent's clone3 will be refused too")
	}
	go g.run(sock)
	return g
}

// stop closes the listener (or stops waiting for it) and waits until the
// gate's goroutine returned. A filter without a listener fails every
// notification, so an agent still running then gets ENOSYS from clone3.
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

func (g *clone3Gate) run(sock *os.File) {
	defer close(g.done)
	if g.agentFd >= 0 {
		defer unix.Close(g.agentFd)
	}
	l, err := g.receive(sock)
	if err != nil {
		g.log.WithError(err).Warn("exec agent's seccomp listener not received: the agent cannot start calls")
		return
	}
	if l == nil || !g.hold(l) {
		return
	}
	if err := g.serve(l); err != nil && !errors.Is(err, os.ErrClosed) {
		g.log.WithError(err).Warn("answering the exec agent's seccomp notifications")
	}
}

// receive reads the listener the agent sends over sock (SCM_RIGHTS); nil
// when the agent closes its end without sending one.
func (g *clone3Gate) receive(sock *os.File) (*os.File, error) {
	c, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return nil, err
	}
	if !g.hold(c) {
		return nil, nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("not a unix socket: %T", c)
	}
	_ = uc.SetReadDeadline(time.Now().Add(startTimeout))
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(make([]byte, 1), oob)
	if n == 0 && oobn == 0 {
		return nil, nil // closed without a listener (or the agent died)
	}
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("bad control message (%d messages): %v", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("want one descriptor, got %d: %v", len(fds), err)
	}
	// Non-blocking, so that the runtime's poller waits for notifications
	// and Close interrupts the wait.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	return os.NewFile(uintptr(fds[0]), "seccomp-listener"), nil
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
