package networkpod

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// scriptedAgent speaks the agent's protocol on a socket of its own: it
// answers calls with their path as stdout, batch at a time in the reverse
// order of their arrival; a call of "/hold" only once it is cancelled, one
// of "/stuck" never; and it counts connections. The real agent's side runs
// in every test that starts a container; this one shows kurmad's
// multiplexing against answers in any order.
type scriptedAgent struct {
	l     net.Listener
	batch int
	mu    sync.Mutex
	conns []net.Conn
}

func newScriptedAgent(t *testing.T, batch int) *scriptedAgent {
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "sock"))
	if err != nil {
		t.Fatal(err)
	}
	a := &scriptedAgent{l: l, batch: batch}
	t.Cleanup(func() {
		l.Close()
		a.dropAll()
	})
	go a.accept()
	return a
}

func (a *scriptedAgent) accept() {
	for {
		c, err := a.l.Accept()
		if err != nil {
			return
		}
		a.mu.Lock()
		a.conns = append(a.conns, c)
		a.mu.Unlock()
		go a.serve(c)
	}
}

func (a *scriptedAgent) serve(c net.Conn) {
	type pending struct {
		id   uint64
		path string
	}
	var waiting []pending
	held := map[uint64]bool{}
	answer := func(id uint64, resp *agent.Response) { _, _ = c.Write(agent.AppendAnswer(nil, id, resp)) }
	r := bufio.NewReader(c)
	for {
		h, err := agent.ReadHeader(r)
		if err != nil {
			return
		}
		body, err := agent.ReadBody(r, h, agent.MaxRequestSize)
		if err != nil {
			return
		}
		if h.Kind == agent.FrameCancel {
			if held[h.ID] {
				delete(held, h.ID)
				answer(h.ID, &agent.Response{ExitCode: -1, Signal: "SIGKILL", TimedOut: true})
			}
			continue
		}
		req, err := agent.DecodeRequest(body)
		if err != nil {
			answer(h.ID, &agent.Response{Error: err.Error()})
			continue
		}
		switch req.Path {
		case "/hold":
			held[h.ID] = true
		case "/stuck":
		default:
			waiting = append(waiting, pending{h.ID, req.Path})
			if len(waiting) == a.batch {
				for i := len(waiting) - 1; i >= 0; i-- {
					answer(waiting[i].id, &agent.Response{Stdout: []byte(waiting[i].path)})
				}
				waiting = nil
			}
		}
	}
}

func (a *scriptedAgent) connections() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

func (a *scriptedAgent) dropAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.conns {
		c.Close()
	}
}

func callReq(path string) *agent.Request {
	return &agent.Request{Path: path, Timeout: time.Minute}
}

// Concurrent calls share one connection and each gets its own answer,
// whatever order they come in.
func TestAgentConnMultiplexes(t *testing.T) {
	const calls = 32
	a := newScriptedAgent(t, calls)
	c := newAgentConn(a.l.Addr().String())
	defer c.close()
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			path := fmt.Sprintf("/call-%d", i)
			resp, err := c.call(context.Background(), callReq(path), nil, time.Minute, nil)
			if err != nil || string(resp.Stdout) != path {
				t.Errorf("call %s: %+v, %v; want its own answer", path, resp, err)
			}
		})
	}
	wg.Wait()
	if n := a.connections(); n != 1 {
		t.Errorf("%d connections, want 1 for every call", n)
	}
}

// A cancelled call is cancelled in the agent, whose answer (after its
// kill) is what the call returns; the connection serves on.
func TestAgentConnCancel(t *testing.T) {
	a := newScriptedAgent(t, 1)
	c := newAgentConn(a.l.Addr().String())
	defer c.close()
	if _, err := c.call(context.Background(), callReq("/first"), nil, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var resp *agent.Response
	var err error
	go func() {
		defer close(done)
		resp, err = c.call(ctx, callReq("/hold"), nil, time.Minute, nil)
	}()
	cancel()
	<-done
	if err != nil || resp == nil || !resp.TimedOut {
		t.Fatalf("cancelled call: %+v, %v; want the agent's answer after its kill", resp, err)
	}
	if resp, err := c.call(context.Background(), callReq("/after"), nil, time.Minute, nil); err != nil || string(resp.Stdout) != "/after" {
		t.Errorf("call after a cancel: %+v, %v", resp, err)
	}
	if n := a.connections(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// A connection the agent closes fails the calls waiting on it; the next
// call dials again. A call whose agent answers neither it nor its cancel
// within agentGrace after the hard limit gives up; the connection serves
// the other calls on.
func TestAgentConnLost(t *testing.T) {
	a := newScriptedAgent(t, 1)
	c := newAgentConn(a.l.Addr().String())
	defer c.close()
	done := make(chan error, 1)
	go func() {
		_, err := c.call(context.Background(), callReq("/hold"), nil, time.Minute, nil)
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the call's connection", func() error {
		if a.connections() == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	a.dropAll()
	if err := <-done; err == nil {
		t.Fatal("a call whose connection closed returned no error")
	}
	if resp, err := c.call(context.Background(), callReq("/again"), nil, time.Minute, nil); err != nil || string(resp.Stdout) != "/again" {
		t.Fatalf("call after the connection was lost: %+v, %v", resp, err)
	}
	if n := a.connections(); n != 2 {
		t.Errorf("%d connections, want 2 (one dialled again)", n)
	}

	start := time.Now()
	if _, err := c.call(context.Background(), callReq("/stuck"), nil, time.Millisecond, nil); !errors.Is(err, errAgentDeadline) {
		t.Errorf("a call the agent never answers: %v, want errAgentDeadline", err)
	}
	if took := time.Since(start); took < agentGrace {
		t.Errorf("gave up after %v, before the agent's grace of %v", took, agentGrace)
	}
	if resp, err := c.call(context.Background(), callReq("/third"), nil, time.Minute, nil); err != nil || string(resp.Stdout) != "/third" || a.connections() != 2 {
		t.Errorf("call after a stuck one: %+v, %v, %d connections; want the same connection", resp, err, a.connections())
	}
}
