package agent

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// A call's view is the mount namespace every process of the call starts
// in: kurmad makes it (networkpod's callview.go: the container's mounts,
// with the netns dir holding only the namespaces the call's arguments name)
// and sends it with the request (Request.View, the descriptor alongside
// the request's first bytes). The agent never mounts anything for it: it
// enters it on a thread of its own for each process start (onViewThread),
// and that thread, in another mount namespace, ends with the start.
//
// This file and the descriptor's passage in handle are the agent's whole
// part.

// enterView moves the calling thread, which must be locked and never
// unlocked, into the mount namespace view.
func enterView(view int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("call view: unshare the filesystem context: %w", err)
	}
	if err := unix.Setns(view, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("call view: enter: %w", err)
	}
	return nil
}

// onViewThread runs fn on a fresh thread inside view, which ends with fn;
// with no view (-1) fn runs on the caller's goroutine.
func onViewThread[T any](view int, fn func() (T, error)) (T, error) {
	if view < 0 {
		return fn()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		if err := enterView(view); err != nil {
			var zero T
			ch <- result{zero, err}
			return
		}
		v, err := fn()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// recvConn reads a connection's bytes with recvmsg, queueing the
// descriptors that come along (the calls' views, in the order of their
// frames: one arrives no later than its frame's first byte).
type recvConn struct {
	f   syscall.Conn
	fds []int // received, not yet taken
}

func newRecvConn(f syscall.Conn) *recvConn { return &recvConn{f: f} }

// RecvConn reads conn's bytes, keeping the descriptors that come along:
// Take returns them in order (kurmad's side of a watch, for the agent's
// seccomp listener).
type RecvConn = recvConn

// NewRecvConn reads conn (see RecvConn).
func NewRecvConn(conn syscall.Conn) *RecvConn { return newRecvConn(conn) }

// Take is take: the first descriptor received and not taken, -1 when
// none; the caller owns it.
func (c *recvConn) Take() int { return c.take() }

// Close closes the descriptors received but not taken.
func (c *recvConn) Close() { c.close() }

func (c *recvConn) Read(p []byte) (int, error) {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		n    int
		rerr error
	)
	oob := make([]byte, unix.CmsgSpace(4*4))
	err = rc.Read(func(fd uintptr) bool {
		var oobn int
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(rerr, unix.EAGAIN) {
			return false
		}
		if rerr == nil && oobn > 0 {
			c.keep(oob[:oobn])
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// keep queues the descriptors of the control messages.
func (c *recvConn) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		c.fds = append(c.fds, fds...)
	}
}

// take returns the first descriptor received and not taken (-1 when
// none); the caller owns it.
func (c *recvConn) take() int {
	if len(c.fds) == 0 {
		return -1
	}
	fd := c.fds[0]
	c.fds = c.fds[1:]
	return fd
}

// close closes the descriptors received but not taken.
func (c *recvConn) close() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}
