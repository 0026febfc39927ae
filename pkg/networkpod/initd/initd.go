// Package initd is the service of kurma-init, the small binary that
// starts kurma's plugin containers: kurmad (pkg/networkpod) asks it to
// create a libcontainer container and run its init, and libcontainer,
// which always starts a container's processes by re-executing the binary
// that calls it, then re-executes kurma-init (a few packages: libcontainer
// and what it needs) rather than kurmad (hundreds). kurmad keeps one
// kurma-init for all its starts; the containers it starts are its
// children until it exits with kurmad, then the host's (or the nearest
// subreaper's): a plugin container outlives both.
//
// The wire is a SOCK_SEQPACKET unix socket: each message is one JSON
// Request (kurmad → kurma-init), with the process's descriptors alongside
// (SCM_RIGHTS: stdin, stdout, stderr, then its extra files), or one JSON
// Response (kurma-init → kurmad).
package initd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// MaxMessage bounds a message on the wire: a container's config with its
// mounts and paths is some tens of KiB.
const MaxMessage = 1 << 20

// Request asks for one container: created from Config under Root (its
// libcontainer state) with id Container, its init Process started.
type Request struct {
	Seq       uint64
	Root      string
	Container string
	Config    *configs.Config
	Process   Process
}

// Process is the container's init.
type Process struct {
	Args         []string
	Env          []string
	Cwd          string
	Capabilities *configs.Capabilities
	// Files is how many descriptors came with the request: stdin, stdout,
	// stderr, then the extra files (the init's fd 3 on).
	Files int
}

// Response answers the request of the same Seq: the init's host PID, or
// why the container could not start (nothing of it is left then).
type Response struct {
	Seq uint64
	Pid int
	Err string
}

// Serve answers requests on the SOCK_SEQPACKET socket fd until it ends
// (kurmad closed it, or went), each on its own goroutine, and returns once
// the starts under way are done. The inits it started are its children:
// it reaps them as they end.
func Serve(fd int, logf func(format string, args ...any)) error {
	var (
		wmu sync.Mutex
		wg  sync.WaitGroup
	)
	defer wg.Wait()
	buf := make([]byte, MaxMessage)
	oob := make([]byte, unix.CmsgSpace(16*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kurma-init: read a request: %w", err)
		}
		if n == 0 && oobn == 0 {
			return nil // kurmad closed its end
		}
		files := receivedFiles(oob[:oobn])
		var req Request
		err = json.Unmarshal(buf[:n], &req)
		if err == nil && (flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(files) != req.Process.Files || req.Process.Files < 3) {
			err = fmt.Errorf("a request with %d descriptors (truncated: %v), want %d and at least 3", len(files), flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0, req.Process.Files)
		}
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			logf("kurma-init: bad request: %v", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := start(&req, files, logf)
			b, _ := json.Marshal(resp)
			wmu.Lock()
			defer wmu.Unlock()
			if err := unix.Sendmsg(fd, b, nil, nil, 0); err != nil {
				logf("kurma-init: answer %s: %v", req.Container, err)
			}
		}()
	}
}

// start creates and runs one container; it closes files.
func start(req *Request, files []*os.File, logf func(format string, args ...any)) *Response {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	resp := &Response{Seq: req.Seq}
	c, err := libcontainer.Create(req.Root, req.Container, req.Config)
	if err != nil {
		resp.Err = "create container: " + err.Error()
		return resp
	}
	p := &libcontainer.Process{
		Args: req.Process.Args, Env: req.Process.Env, Cwd: req.Process.Cwd,
		Stdin: files[0], Stdout: files[1], Stderr: files[2], ExtraFiles: files[3:],
		Capabilities: req.Process.Capabilities, Init: true,
	}
	if err := c.Run(p); err != nil {
		_ = c.Destroy()
		reapLeakedRuncChildren()
		resp.Err = "start its init: " + err.Error()
		return resp
	}
	pid, err := p.Pid()
	if err != nil {
		resp.Err = "its init: " + err.Error()
		return resp
	}
	resp.Pid = pid
	// The init is ours until we exit: reap it when it ends.
	go func() { _, _ = p.Wait() }()
	return resp
}

// receivedFiles are the descriptors of the control messages in oob.
func receivedFiles(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var out []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			out = append(out, os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd)))
		}
	}
	return out
}

// reapLeakedRuncChildren reaps libcontainer's intermediate processes that
// libcontainer itself leaves as zombies when starting a process fails
// (runc v1.3.3 setnsProcess.execSetns returns on a failed stage-0 without
// waiting for stage-1 and stage-2): only zombies, only our own children,
// only those two names, and only by pid, never wait4(-1), which would
// steal exit statuses from libcontainer.
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
