package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

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
// part: a transport that reuses connections changes how the descriptor
// arrives, not what is done with it.

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

// recvConn reads a connection's bytes with recvmsg, keeping the first
// descriptor that comes along (the call's view) and closing any other.
type recvConn struct {
	f  *os.File
	fd int // received, -1 when none
}

func newRecvConn(f *os.File) *recvConn { return &recvConn{f: f, fd: -1} }

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

// keep keeps the first descriptor of the control messages and closes the
// rest.
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
		for _, fd := range fds {
			if c.fd < 0 {
				c.fd = fd
			} else {
				unix.Close(fd)
			}
		}
	}
}

// take returns the received descriptor (-1 when none); the caller owns it.
func (c *recvConn) take() int {
	fd := c.fd
	c.fd = -1
	return fd
}

// close closes a descriptor received but not taken.
func (c *recvConn) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}
