package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The watch. kurmad follows each container it runs over a connection of
// its own to the agent, its watch: it sends FrameWatch; the agent answers
// FrameState, the main's state then (its PID, whether the agent was ready
// while it ran, its end) with the agent's seccomp listener alongside
// (SCM_RIGHTS: kurmad answers the agent's clone3, clone3gate.go), and then
// FrameEvent after FrameEvent: each line the main writes to its stdout or
// stderr, each message of the agent's own, and the main's end, in the
// order they happened. One kurmad watches at a time: a new watch takes
// over from the one before, whose connection the agent closes.
//
// The watch is what lets a container outlive kurmad. The main's output
// goes to pipes of the agent's, never kurmad's; while nobody watches, the
// agent keeps the last hubKeep lines (and counts those it drops) and the
// main's end, and the next watch gets them after its state; it keeps its
// seccomp listener, so that each new kurmad gets it again. A restarted
// kurmad adopts a running container by its watch (networkpod's
// adoption).

// Watch frames; see FrameCall for the others.
const (
	FrameWatch byte = 5 // client → agent: follow this agent
	FrameState byte = 6 // agent → client: the state, with the listener
	FrameEvent byte = 7 // agent → client: a line, or the main's end
)

// WatchProtocol is the version of the watch this agent speaks, in its
// state: a kurmad adopts only agents whose version it knows.
const WatchProtocol = 1

// Events.
const (
	EventLog  byte = 1 // a line of Stream
	EventExit byte = 2 // the main exited (Status)
	EventFail byte = 3 // the main could not be started (Failed)
)

// Streams of EventLog.
const (
	StreamStdout byte = 1 // the main's stdout
	StreamStderr byte = 2 // the main's stderr
	StreamAgent  byte = 3 // the agent's own messages
)

// State is the agent's answer to a watch.
type State struct {
	Protocol int
	// MainPid is the main's PID in the container's PID namespace; 0
	// when the agent runs none.
	MainPid int
	// Ready: the agent was about to serve while the main still ran. A
	// main that ended before is never ready.
	Ready bool
	// Ended: the main exited (Status, its wait status) or could not be
	// started (Failed says why).
	Ended  bool
	Status uint32
	Failed string
	// Dropped is how many lines the agent dropped while nobody watched.
	Dropped uint64
}

// Event is one event of a watch.
type Event struct {
	Kind   byte
	Stream byte   // EventLog
	Line   []byte // EventLog, without its newline
	Status uint32 // EventExit
	Failed string // EventFail
}

// AppendWatch appends a watch request to buf.
func AppendWatch(buf []byte) []byte {
	buf, start := beginFrame(buf, FrameWatch, 0)
	buf = binary.AppendUvarint(buf, WatchProtocol)
	return endFrame(buf, start)
}

func appendState(buf []byte, st *State) []byte {
	buf, start := beginFrame(buf, FrameState, 0)
	buf = binary.AppendUvarint(buf, uint64(st.Protocol))
	buf = binary.AppendVarint(buf, int64(st.MainPid))
	var flags byte
	if st.Ready {
		flags |= 1
	}
	if st.Ended {
		flags |= 2
	}
	buf = append(buf, flags)
	buf = binary.AppendUvarint(buf, uint64(st.Status))
	buf = appendBytes(buf, []byte(st.Failed))
	buf = binary.AppendUvarint(buf, st.Dropped)
	return endFrame(buf, start)
}

// DecodeState decodes a state frame's body.
func DecodeState(body []byte) (*State, error) {
	d := decoder{b: body}
	st := &State{}
	st.Protocol = int(d.uvarint())
	st.MainPid = int(d.varint())
	flags := d.byte()
	st.Ready, st.Ended = flags&1 != 0, flags&2 != 0
	st.Status = uint32(d.uvarint())
	st.Failed = string(d.bytes())
	st.Dropped = d.uvarint()
	if d.err != nil {
		return nil, fmt.Errorf("watch state cut short: %w", d.err)
	}
	return st, nil
}

func appendEvent(buf []byte, ev *Event) []byte {
	buf, start := beginFrame(buf, FrameEvent, 0)
	buf = append(buf, ev.Kind)
	switch ev.Kind {
	case EventLog:
		buf = append(buf, ev.Stream)
		buf = appendBytes(buf, ev.Line)
	case EventExit:
		buf = binary.AppendUvarint(buf, uint64(ev.Status))
	case EventFail:
		buf = appendBytes(buf, []byte(ev.Failed))
	}
	return endFrame(buf, start)
}

// DecodeEvent decodes an event frame's body. An event of a kind this
// version does not know decodes with that Kind and nothing else.
func DecodeEvent(body []byte) (*Event, error) {
	d := decoder{b: body}
	ev := &Event{Kind: d.byte()}
	switch ev.Kind {
	case EventLog:
		ev.Stream = d.byte()
		ev.Line = d.bytes()
	case EventExit:
		ev.Status = uint32(d.uvarint())
	case EventFail:
		ev.Failed = string(d.bytes())
	}
	if d.err != nil {
		return nil, fmt.Errorf("watch event cut short: %w", d.err)
	}
	return ev, nil
}

// hubKeep is how many lines the agent keeps while nobody watches; the
// main's end is always kept.
const hubKeep = 256

// hubQueue is how many events wait for the watcher's connection: past
// it, what writes them (the relay of the main's output) waits for it.
const hubQueue = 1024

// MaxLine is the longest line an event carries: a longer one is cut in
// pieces of this length.
const MaxLine = 4096

// Hub is the agent's side of the watch: the state, the events on their
// way to the watcher, or kept while there is none.
type Hub struct {
	mu       sync.Mutex
	state    State
	listener int      // the seccomp listener, -1 without
	w        *watcher // the current watcher, nil when none
	kept     [][]byte // event frames kept while none watches
	keptLogs int      // of which log lines
}

type watcher struct {
	conn syscall.Conn
	out  chan []byte
	gone chan struct{} // closed once it no longer watches
}

// NewHub returns a hub with nothing to tell yet.
func NewHub() *Hub { return &Hub{listener: -1, state: State{Protocol: WatchProtocol}} }

// SetListener keeps fd, the agent's seccomp listener, for every watcher.
func (h *Hub) SetListener(fd int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listener = fd
}

// SetMain records the main's PID (in the container's PID namespace).
func (h *Hub) SetMain(pid int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state.MainPid = pid
}

// SetReady records that the agent is about to serve while the main runs.
func (h *Hub) SetReady() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state.Ready = true
}

// Log sends a line of stream (copied).
func (h *Hub) Log(stream byte, line []byte) {
	h.send(appendEvent(nil, &Event{Kind: EventLog, Stream: stream, Line: line}), false)
}

// Logf sends one of the agent's own messages.
func (h *Hub) Logf(format string, args ...any) {
	h.Log(StreamAgent, []byte("kurma-agent: "+fmt.Sprintf(format, args...)))
}

// Exit records and sends the main's end.
func (h *Hub) Exit(ws unix.WaitStatus) {
	h.mu.Lock()
	h.state.Ended, h.state.Status = true, uint32(ws)
	h.mu.Unlock()
	h.send(appendEvent(nil, &Event{Kind: EventExit, Status: uint32(ws)}), true)
}

// Fail records and sends why the main could not be started.
func (h *Hub) Fail(msg string) {
	h.mu.Lock()
	h.state.Ended, h.state.Failed = true, msg
	h.mu.Unlock()
	h.send(appendEvent(nil, &Event{Kind: EventFail, Failed: msg}), true)
}

// send queues frame for the watcher, waiting for room in its queue, or
// keeps it while none watches (a line past hubKeep pushes the oldest one
// out; the main's end is always kept).
func (h *Hub) send(frame []byte, end bool) {
	h.mu.Lock()
	w := h.w
	if w == nil {
		h.keepLocked(frame, end)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	select {
	case w.out <- frame:
	case <-w.gone:
		h.mu.Lock()
		h.keepLocked(frame, end)
		h.mu.Unlock()
	}
}

func (h *Hub) keepLocked(frame []byte, end bool) {
	if !end {
		if h.keptLogs == hubKeep {
			for i, f := range h.kept {
				if f[4] == FrameEvent && f[frameHeader] == EventLog {
					h.kept = append(h.kept[:i:i], h.kept[i+1:]...)
					h.keptLogs--
					h.state.Dropped++
					break
				}
			}
		}
		h.keptLogs++
	}
	h.kept = append(h.kept, frame)
}

// Attach makes conn the watcher (its FrameWatch read): it gets the state
// with the listener, what was kept, then every event, until conn ends or
// another watcher takes over. It returns once conn no longer watches;
// read, which reads conn past the watch request, tells when the watcher
// closed its end.
func (h *Hub) Attach(conn syscall.Conn, read func() error) {
	w := &watcher{conn: conn, out: make(chan []byte, hubQueue), gone: make(chan struct{})}
	h.mu.Lock()
	old := h.w
	state := appendState(nil, &h.state)
	listener := h.listener
	for _, f := range h.kept {
		w.out <- f // at most hubKeep lines and an end: room enough
	}
	h.kept, h.keptLogs, h.state.Dropped = nil, 0, 0
	h.w = w
	h.mu.Unlock()
	if old != nil {
		shutdown(old.conn) // it ends with its reader
	}
	var rights []byte
	if listener >= 0 {
		rights = unix.UnixRights(listener)
	}
	if err := sendFrame(conn, state, rights); err != nil {
		h.detach(w)
		return
	}
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		for {
			select {
			case f := <-w.out:
				if sendFrame(conn, f, nil) != nil {
					shutdown(conn)
					return
				}
			case <-w.gone:
				return
			}
		}
	}()
	_ = read() // until the watcher closes, or shutdown
	h.detach(w)
	<-writeDone
}

// detach ends w's watch: what it had not written yet is kept.
func (h *Hub) detach(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w == w {
		h.w = nil
	}
	select {
	case <-w.gone:
		return
	default:
	}
	close(w.gone)
	for {
		select {
		case f := <-w.out:
			end := f[frameHeader] != EventLog
			h.keepLocked(f, end)
		default:
			return
		}
	}
}

// sendFrame writes frame on conn, rights alongside its first bytes.
func sendFrame(conn syscall.Conn, frame, rights []byte) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	for len(frame) > 0 {
		var n int
		var werr error
		err = rc.Write(func(fd uintptr) bool {
			n, werr = unix.SendmsgN(int(fd), frame, rights, nil, unix.MSG_NOSIGNAL)
			return !errors.Is(werr, unix.EAGAIN)
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
		frame, rights = frame[n:], nil
	}
	return nil
}

// shutdown ends conn both ways: its reader and writer return.
func shutdown(conn syscall.Conn) {
	if rc, err := conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
}

// Relay sends each line read from r as a line of stream until r ends, then
// closes r and done.
func (h *Hub) Relay(stream byte, r *os.File, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	buf := make([]byte, 0, MaxLine)
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		data := chunk[:n]
		for len(data) > 0 {
			i := indexNewline(data)
			if i < 0 {
				room := MaxLine - len(buf)
				take := min(room, len(data))
				buf = append(buf, data[:take]...)
				data = data[take:]
				if len(buf) == MaxLine {
					h.Log(stream, buf)
					buf = buf[:0]
				}
				continue
			}
			take := min(i, MaxLine-len(buf))
			buf = append(buf, data[:take]...)
			h.Log(stream, buf)
			buf = buf[:0]
			if take < i {
				data = data[take:] // the rest of a long line
				continue
			}
			data = data[i+1:]
		}
		if err != nil {
			if len(buf) > 0 {
				h.Log(stream, buf)
			}
			return
		}
	}
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}
