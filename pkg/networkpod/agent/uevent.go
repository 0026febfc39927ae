package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The uevent guard. Writing "add" or "change" to a device's uevent file in
// sysfs makes the kernel send the host's listeners (udev, systemd) a
// uevent of that device, as if the device had done it: udev runs its
// rules on it. The network devices' sysfs trees are writable in a plugin
// container (bridge and port settings, a link's attributes), so their
// uevent files were too, and a mount can cover only the files that exist
// when it is made, not the links plugins make later. So every open made
// through those trees' mounts is answered, through fanotify: a file named
// uevent is refused (EPERM) whatever it is opened for (fanotify does not
// say; no plugin reads it), everything else is let through. A permission
// event holds the open until the answer, so nothing races it.
//
// Two guards answer: each container's agent guards its container's own
// mounts, from before its main starts for as long as the container runs
// (kurmad's absence included: nothing to adopt, no window), and kurmad
// guards each call's view (a copy of those mounts, which a mark does not
// follow) as it makes it.

// UeventGuard is one fanotify group and what answers it.
type UeventGuard struct {
	f      *os.File // non-blocking, on the runtime's poller
	logf   func(format string, args ...any)
	closed atomic.Bool
}

// NewUeventGuard makes the group and starts answering it; logf hears why
// it stopped, should it stop before Close.
func NewUeventGuard(logf func(format string, args ...any)) (*UeventGuard, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_LARGEFILE)
	if err != nil {
		return nil, fmt.Errorf("fanotify: %w", err)
	}
	g := &UeventGuard{f: os.NewFile(uintptr(fd), "fanotify"), logf: logf}
	go g.serve()
	return g, nil
}

// Close stops the group: opens it held are let through, and no mount is
// watched any more.
func (g *UeventGuard) Close() {
	if g != nil {
		g.closed.Store(true)
		g.f.Close()
	}
}

// Mark watches the mounts at paths (absolute) under root: a container's
// root through /proc/<pid>/root, or "/" for the calling thread's mount
// namespace. A path that does not exist is skipped.
func (g *UeventGuard) Mark(root string, paths []string) error {
	if g == nil {
		return nil
	}
	rc, err := g.f.SyscallConn()
	if err != nil {
		return err
	}
	var merr error
	err = rc.Control(func(fd uintptr) {
		for _, p := range paths {
			err := unix.FanotifyMark(int(fd), unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, unix.FAN_OPEN_PERM, unix.AT_FDCWD, filepath.Join(root, p))
			if err != nil && !errors.Is(err, unix.ENOENT) {
				merr = fmt.Errorf("watch the opens of %s: %w", p, err)
				return
			}
		}
	})
	return errors.Join(err, merr)
}

// serve answers until the group is closed.
func (g *UeventGuard) serve() {
	rc, err := g.f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 4096)
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err != nil || (rerr != nil && !errors.Is(rerr, unix.EINTR)) {
			if !g.closed.Load() && g.logf != nil {
				g.logf("uevent guard stopped: %v", errors.Join(err, rerr))
			}
			return
		}
		for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
			ev := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if ev.Event_len == 0 {
				break
			}
			off += int(ev.Event_len)
			if ev.Fd < 0 {
				continue
			}
			resp := unix.FanotifyResponse{Fd: ev.Fd, Response: unix.FAN_ALLOW}
			if name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(ev.Fd))); err == nil && filepath.Base(name) == "uevent" {
				resp.Response = unix.FAN_DENY
			}
			_ = rc.Write(func(fd uintptr) bool {
				b := (*[unsafe.Sizeof(resp)]byte)(unsafe.Pointer(&resp))[:]
				_, err := unix.Write(int(fd), b)
				return !errors.Is(err, unix.EAGAIN)
			})
			unix.Close(int(ev.Fd))
		}
	}
}
