package networkpod

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// kurmad's side of the watch (agent's watch.go): one connection per
// container, made once its agent runs (or when kurmad adopts it), on which
// the agent says what its main does and writes, and hands over its
// seccomp listener; and the agent's pidfd, which says when the agent
// ended, whoever its parent is.

// watchAgent dials the agent's socket, asks for its watch and waits for
// the state (the agent answers once it serves, after its setup); then it
// answers the agent's clone3 (the listener that came with the state) and
// hands the events to inst until the watch ends. An agent that ends first
// fails it.
func (h *Host) watchAgent(inst *instance, log logrus.FieldLogger) error {
	type result struct {
		conn  *net.UnixConn
		rc    *agent.RecvConn
		br    *bufio.Reader
		state *agent.State
		err   error
	}
	ch := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		var r result
		r.conn, r.rc, r.br, r.state, r.err = dialWatch(ctx, inst.socket)
		ch <- r
	}()
	var r result
	select {
	case r = <-ch:
	case <-inst.agentDone:
		cancel()
		if r := <-ch; r.conn != nil {
			r.conn.Close()
			r.rc.Close()
		}
		inst.watchErr = errors.New("exec agent ended before it said it serves")
		close(inst.watched)
		return inst.agentReason()
	}
	if r.err != nil {
		inst.watchErr = fmt.Errorf("exec agent's watch: %w", r.err)
		close(inst.watched)
		return inst.watchErr
	}
	inst.watch, inst.state = r.conn, r.state
	if fd := r.rc.Take(); fd >= 0 {
		// Non-blocking: the runtime's poller waits for its notifications.
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		} else {
			inst.gate = startClone3Gate(os.NewFile(uintptr(fd), "seccomp-listener"), inst.agentPid, inst.pidfd, log)
		}
	}
	r.rc.Close() // nothing else comes with descriptors
	if inst.state.Ended {
		inst.endMain(inst.state.Status, inst.state.Failed)
	}
	if inst.state.Dropped > 0 {
		inst.agentLog.log.WithField("dropped", inst.state.Dropped).Warn("lines of the main's output the agent dropped while no kurmad watched it")
	}
	close(inst.watched)
	go inst.readWatch(r.br)
	return nil
}

// dialWatch connects to the agent's socket and asks for its watch; it
// returns once the agent answered with its state.
func dialWatch(ctx context.Context, socket string) (*net.UnixConn, *agent.RecvConn, *bufio.Reader, *agent.State, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	conn := nc.(*net.UnixConn)
	if _, err := conn.Write(agent.AppendWatch(nil)); err != nil {
		conn.Close()
		return nil, nil, nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	rc := agent.NewRecvConn(conn)
	br := bufio.NewReaderSize(rc, 64<<10)
	st, err := readState(br)
	if err != nil {
		conn.Close()
		rc.Close()
		return nil, nil, nil, nil, err
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn, rc, br, st, nil
}

// readState reads the watch's first frame, the agent's state.
func readState(br *bufio.Reader) (*agent.State, error) {
	h, err := agent.ReadHeader(br)
	if err != nil {
		return nil, err
	}
	if h.Kind != agent.FrameState {
		return nil, fmt.Errorf("the agent answered a watch with a frame of kind %d", h.Kind)
	}
	body, err := agent.ReadBody(br, h, 64<<10)
	if err != nil {
		return nil, err
	}
	st, err := agent.DecodeState(body)
	if err != nil {
		return nil, err
	}
	if st.Protocol != agent.WatchProtocol {
		return nil, fmt.Errorf("the agent speaks watch protocol %d, this kurmad %d", st.Protocol, agent.WatchProtocol)
	}
	return st, nil
}

// readWatch hands the watch's events to inst until it ends.
func (inst *instance) readWatch(br *bufio.Reader) {
	defer close(inst.watchDone)
	for {
		h, err := agent.ReadHeader(br)
		if err != nil {
			return
		}
		body, err := agent.ReadBody(br, h, 2*agent.MaxLine+64)
		if err != nil || h.Kind != agent.FrameEvent {
			return
		}
		ev, err := agent.DecodeEvent(body)
		if err != nil {
			return
		}
		switch ev.Kind {
		case agent.EventLog:
			w := map[byte]*logWriter{agent.StreamStdout: inst.stdout, agent.StreamStderr: inst.stderr, agent.StreamAgent: inst.agentLog}[ev.Stream]
			if w != nil {
				_, _ = w.Write(append(ev.Line, '\n'))
			}
		case agent.EventExit:
			inst.endMain(ev.Status, "")
		case agent.EventFail:
			inst.endMain(0, ev.Failed)
		}
	}
}

// endMain records the main's end, once: its wait status, or why it could
// not be started.
func (inst *instance) endMain(ws uint32, failed string) {
	select {
	case <-inst.mainDone:
		return
	default:
	}
	switch e := (mainExit{unix.WaitStatus(ws)}); {
	case failed != "":
		inst.mainErr = errors.New(failed)
	case !e.success():
		inst.mainErr = e
	}
	inst.mainEndAt = time.Now()
	close(inst.mainDone)
}

// waitAgent closes agentDone once the agent ended (its pidfd reads
// ready), unless the pidfd was closed first (release: kurmad lets the
// container go).
func (inst *instance) waitAgent() {
	rc, err := inst.pidfd.SyscallConn()
	if err != nil {
		return
	}
	err = rc.Read(func(fd uintptr) bool {
		return unix.PidfdSendSignal(int(fd), 0, nil, 0) != nil
	})
	if err == nil {
		close(inst.agentDone)
	}
}

// openPidfd opens a pidfd of pid, non-blocking, and checks that pid is
// the process that started at start (clock ticks since boot, as
// /proc/<pid>/stat and libcontainer's state say): held open, the pidfd
// then names that process for good, whoever reaps it.
func openPidfd(pid int, start uint64) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	if got, err := processStart(pid); err != nil || got != start {
		f.Close()
		return nil, fmt.Errorf("process %d is not the one that started at %d (%d): %v", pid, start, got, err)
	}
	return f, nil
}

// processStart is the start time of process pid, in clock ticks since
// boot (/proc/<pid>/stat's 22nd field).
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, errors.New("bad stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}
