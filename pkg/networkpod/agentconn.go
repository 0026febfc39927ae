package networkpod

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// agentConn is kurmad's one connection to a container's exec agent,
// dialled at its first call and shared by every call after it, which it
// multiplexes (agent's package doc): a call writes its frame, with its
// view, and waits for the answer its reader hands over. A connection that
// fails fails the calls waiting on it, and the next call dials again.
type agentConn struct {
	socket string

	dial sync.Mutex // one dial at a time
	mu   sync.Mutex // guards what follows
	conn *net.UnixConn
	wmu  sync.Mutex // one frame written at a time, with its descriptor
	next uint64
	wait map[uint64]*pendingCall
}

// pendingCall is a call waiting for its answer.
type pendingCall struct {
	maxOutput int
	done      chan callResult // buffered: the reader never blocks
	// abandoned: the call gave up waiting (see call); its answer, should
	// it come, is read and dropped.
	abandoned bool
}

type callResult struct {
	resp *agent.Response
	err  error
}

func newAgentConn(socket string) *agentConn {
	return &agentConn{socket: socket, wait: map[uint64]*pendingCall{}}
}

// call runs req in the agent and returns its answer. When ctx ends, it
// cancels the call, which makes the agent kill it and answer, and waits up
// to agentGrace for that answer, so that the call's processes are gone
// when it returns; past hardLimit it cancels the call the same way. When
// no answer comes within agentGrace of the cancel, it gives up with
// errAgentDeadline; the connection stays, for the other calls on it. It
// closes view once sent (see send).
//
// With a hold (not nil), the call is held (req.Held): the agent starts
// its processes and gives them their stdin once hold returned nil, which
// it does while they start; when hold fails, the call is cancelled instead
// (nothing read its stdin) and call returns a *holdError with hold's
// error, once the agent answered.
func (a *agentConn) call(ctx context.Context, req *agent.Request, view *os.File, hardLimit time.Duration, hold func() error) (resp *agent.Response, err error) {
	req.Held = hold != nil
	conn, id, p, err := a.send(ctx, req, view)
	if err != nil {
		return nil, err
	}
	if hold != nil {
		held := make(chan error, 1)
		go func() {
			err := hold()
			if err == nil {
				_ = a.write(conn, agent.AppendRelease(nil, id), nil)
			} else {
				_ = a.write(conn, agent.AppendCancel(nil, id), nil)
			}
			held <- err
		}()
		defer func() {
			if herr := <-held; herr != nil {
				resp, err = nil, &holdError{herr}
			}
		}()
	}
	return a.await(ctx, conn, id, p, hardLimit)
}

// holdError is a held call's hold failing: the call was cancelled before
// its processes got their stdin.
type holdError struct{ err error }

func (e *holdError) Error() string { return "the call was held and not released: " + e.err.Error() }
func (e *holdError) Unwrap() error { return e.err }

// await waits for call id's answer (see call).
func (a *agentConn) await(ctx context.Context, conn *net.UnixConn, id uint64, p *pendingCall, hardLimit time.Duration) (*agent.Response, error) {
	hard := time.NewTimer(hardLimit)
	defer hard.Stop()
	select {
	case r := <-p.done:
		return r.resp, r.err
	case <-ctx.Done():
	case <-hard.C:
	}
	// Cancel and wait for the agent's answer after its kill.
	_ = a.write(conn, agent.AppendCancel(nil, id), nil)
	grace := time.NewTimer(agentGrace)
	defer grace.Stop()
	select {
	case r := <-p.done:
		return r.resp, r.err
	case <-grace.C:
	}
	a.mu.Lock()
	p.abandoned = true
	a.mu.Unlock()
	select {
	case r := <-p.done: // answered meanwhile, or the connection failed
		return r.resp, r.err
	default:
	}
	return nil, errAgentDeadline
}

// send writes req's frame, with view alongside, and registers its
// pending answer. It closes view (when not nil) once the frame is sent or
// cannot be: the frame holds its own reference, and the agent, which drops
// its copy after its answer, is left to pay for the namespace's end, off
// the call's path.
func (a *agentConn) send(ctx context.Context, req *agent.Request, view *os.File) (*net.UnixConn, uint64, *pendingCall, error) {
	if view != nil {
		defer view.Close()
	}
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, 0, nil, &dialError{err}
	}
	p := &pendingCall{maxOutput: req.MaxOutput, done: make(chan callResult, 1)}
	a.mu.Lock()
	if a.conn != conn {
		a.mu.Unlock()
		return nil, 0, nil, errors.New("exec agent connection closed")
	}
	a.next++
	id := a.next
	a.wait[id] = p
	a.mu.Unlock()
	if err := a.write(conn, agent.AppendCall(nil, id, req), view); err != nil {
		// The agent starts a call once its whole frame is in: nothing ran.
		a.fail(conn, err)
		<-p.done
		return nil, 0, nil, &dialError{err}
	}
	return conn, id, p, nil
}

// connect returns the connection, dialled now if there is none.
func (a *agentConn) connect(ctx context.Context) (*net.UnixConn, error) {
	a.mu.Lock()
	c := a.conn
	a.mu.Unlock()
	if c != nil {
		return c, nil
	}
	a.dial.Lock()
	defer a.dial.Unlock()
	a.mu.Lock()
	c = a.conn
	a.mu.Unlock()
	if c != nil {
		return c, nil
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", a.socket)
	if err != nil {
		return nil, err
	}
	c = nc.(*net.UnixConn)
	a.mu.Lock()
	a.conn = c
	a.mu.Unlock()
	go a.read(c)
	return c, nil
}

// write writes one frame on conn, with view's descriptor alongside its
// first bytes (nil: none).
func (a *agentConn) write(conn *net.UnixConn, frame []byte, view *os.File) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	var oob []byte
	if view != nil {
		oob = unix.UnixRights(int(view.Fd()))
	}
	n, _, err := conn.WriteMsgUnix(frame, oob, nil)
	if err == nil && n < len(frame) {
		_, err = conn.Write(frame[n:])
	}
	return err
}

// read hands each answer on conn to its call until conn fails.
func (a *agentConn) read(conn *net.UnixConn) {
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		h, err := agent.ReadHeader(r)
		if err != nil {
			a.fail(conn, err)
			return
		}
		a.mu.Lock()
		p := a.wait[h.ID]
		abandoned := p != nil && p.abandoned
		a.mu.Unlock()
		if h.Kind != agent.FrameAnswer || p == nil {
			a.fail(conn, fmt.Errorf("%w: the exec agent sent a frame of kind %d for call %d, which waits for no answer",
				netplugin.ErrPluginFailed, h.Kind, h.ID))
			return
		}
		body, err := agent.ReadBody(r, h, agent.AnswerLimit(p.maxOutput))
		var resp *agent.Response
		if err == nil {
			resp, err = agent.DecodeResponse(body, p.maxOutput)
		}
		if errors.Is(err, agent.ErrTooLarge) {
			err = fmt.Errorf("%w: the exec agent's answer exceeds its bounds (refused): %w", netplugin.ErrPluginFailed, err)
		}
		if err != nil {
			// Nothing after a frame that could not be read can be.
			a.finish(h.ID, callResult{err: err})
			a.fail(conn, err)
			return
		}
		if abandoned {
			resp = nil // nobody waits for it
		}
		a.finish(h.ID, callResult{resp: resp})
	}
}

// finish hands call id its result, once.
func (a *agentConn) finish(id uint64, r callResult) {
	a.mu.Lock()
	p := a.wait[id]
	delete(a.wait, id)
	a.mu.Unlock()
	if p != nil {
		p.done <- r
	}
}

// fail closes conn, when it is still the connection, and fails every call
// waiting on it with err; the next call dials again.
func (a *agentConn) fail(conn *net.UnixConn, err error) {
	a.mu.Lock()
	if a.conn != conn {
		a.mu.Unlock()
		return
	}
	a.conn = nil
	waiting := a.wait
	a.wait = map[uint64]*pendingCall{}
	a.mu.Unlock()
	conn.Close()
	for _, p := range waiting {
		p.done <- callResult{err: err}
	}
}

// close closes the connection (the container is going away).
func (a *agentConn) close() {
	a.mu.Lock()
	c := a.conn
	a.mu.Unlock()
	if c != nil {
		a.fail(c, net.ErrClosed)
	}
}
