package networkpod

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// agentGrace is how long past the limit kurmad waits for the agent's own
// timeout answer before it closes the connection (which also makes the
// agent kill the call) and reports the timeout itself.
const agentGrace = 2 * time.Second

// Exec runs `path args...` in the container of the network's generation as
// uid 0 with the image's environment, stdin as given, and returns its
// stdout and stderr (each capped at 1 MiB; truncation is noted at the end
// of stderr).
//
// The limit is Options.PluginTimeout or ctx's deadline if earlier; when it
// expires every process the call started is killed, including background
// children holding its stdout, and the error is ErrTimeout. A non-zero exit
// is an *ExecError (ErrPluginFailed). A generation that is not running
// fails at once with ErrUnavailable, without running anything; one that was
// never started (or was removed) with ErrUnknownNetwork. Calls run
// concurrently; a failed call never affects the container.
func (cs *Containers) Exec(ctx context.Context, network string, generation int, path string, args []string, stdin []byte) (stdout, stderr []byte, err error) {
	stdout, stderr, err = cs.exec(ctx, network, generation, path, args, stdin)
	return stdout, stderr, netconfig.WrapNetworkError(network, path, err)
}

// exec is Exec; its errors describe the call, Exec names the network.
func (cs *Containers) exec(ctx context.Context, network string, generation int, path string, args []string, stdin []byte) (stdout, stderr []byte, err error) {
	n, err := cs.lookup(network, generation)
	if err != nil {
		return nil, nil, err
	}
	inst, err := n.running()
	if err != nil {
		return nil, nil, err
	}
	limit := time.Duration(cs.pluginTimeout.Load())
	if dl, ok := ctx.Deadline(); ok {
		if until := time.Until(dl); until < limit {
			limit = until.Round(time.Millisecond)
		}
	}
	if limit <= 0 {
		return nil, nil, &timeoutError{limit: 0}
	}
	start := time.Now()
	resp, err := callAgent(ctx, inst.socket, &agent.Request{
		Path: path, Args: args, Stdin: stdin, Timeout: limit, MaxOutput: agent.DefaultMaxOutput,
	}, limit+agentGrace)
	log := n.log.WithField("op", path).WithField("duration", time.Since(start))
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Cancelled: the agent has killed the call (it answered after the
		// kill unless err says it did not answer).
		return nil, nil, ctx.Err()
	}
	if err != nil {
		if errors.Is(err, errAgentDeadline) || ctx.Err() != nil {
			log.Warn("plugin timed out; the exec agent did not answer in time")
			return nil, nil, &timeoutError{limit: limit}
		}
		var de *dialError
		if errors.As(err, &de) {
			// The container is going away (or restarting): nothing ran.
			return nil, nil, &netconfig.NetworkError{Network: network, Err: &unavailableError{reason: "exec agent not reachable: " + de.err.Error()}}
		}
		if errors.Is(err, ErrPluginFailed) {
			log.WithError(err).Warn("exec agent answer refused")
			return nil, nil, err
		}
		log.WithError(err).Warn("exec agent call failed")
		return nil, nil, fmt.Errorf("exec agent (the container may have stopped): %w", err)
	}
	stdout, stderr = resp.Stdout, resp.Stderr
	if resp.InProcess {
		n.execCalls[1].Add(1)
		log = log.WithField("inProcess", true)
	} else {
		n.execCalls[0].Add(1)
	}
	if resp.StdoutTruncated {
		stderr = append(stderr, fmt.Sprintf("\n[kurma: stdout truncated at %d bytes]\n", agent.DefaultMaxOutput)...)
	}
	if resp.StderrTruncated {
		stderr = append(stderr, fmt.Sprintf("\n[kurma: stderr truncated at %d bytes]\n", agent.DefaultMaxOutput)...)
	}
	if len(stderr) > 0 {
		log = log.WithField("stderr", tail(string(stderr), stderrExcerpt))
	}
	switch {
	case resp.TimedOut:
		log.Warn("plugin timed out")
		return stdout, stderr, &timeoutError{limit: limit}
	case resp.Error != "":
		log.WithField("error", resp.Error).Warn("plugin did not start")
		return stdout, stderr, fmt.Errorf("%w: %s", ErrPluginFailed, resp.Error)
	case resp.ExitCode != 0 || resp.Signal != "":
		e := &ExecError{
			ExitCode: resp.ExitCode, Signal: resp.Signal,
			CNIError: parseCNIError(stdout), Stderr: tail(string(stderr), stderrExcerpt),
		}
		log.WithField("exit", resp.ExitCode).Warn("plugin failed")
		return stdout, stderr, e
	}
	log.Debug("plugin call done")
	return stdout, stderr, nil
}

var errAgentDeadline = errors.New("no answer from the exec agent in time")

// dialError means the agent could not be reached: the call did not start.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// callAgent makes one call over a fresh connection. When ctx ends, it
// half-closes the connection, which makes the agent kill the call and
// answer, and waits up to agentGrace for that answer, so that the call's
// processes are gone when Exec returns. Closing the connection (at
// hardLimit at the latest) also makes the agent kill the call.
func callAgent(ctx context.Context, socket string, req *agent.Request, hardLimit time.Duration) (*agent.Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, &dialError{err}
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(hardLimit))
	stop := context.AfterFunc(ctx, func() {
		_ = conn.CloseWrite()
		_ = conn.SetDeadline(time.Now().Add(agentGrace))
	})
	defer stop()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, err
	}
	var resp agent.Response
	limit := answerLimit(req.MaxOutput)
	if err := json.NewDecoder(&limitedReader{r: conn, n: limit}).Decode(&resp); err != nil {
		if errors.Is(err, errAnswerTooLarge) {
			return nil, fmt.Errorf("%w: the exec agent's answer exceeds %d bytes (refused unread)", ErrPluginFailed, limit)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
			return nil, errAgentDeadline
		}
		return nil, err
	}
	return &resp, nil
}

// answerLimit bounds an agent's answer: both outputs at their cap, base64
// in JSON, plus room for the other fields. Whatever answers on the agent's
// socket, kurmad never reads more.
func answerLimit(maxOutput int) int64 {
	return int64(2*base64.StdEncoding.EncodedLen(maxOutput) + 64<<10)
}

var errAnswerTooLarge = errors.New("answer too large")

// limitedReader reads at most n bytes of r, then fails with
// errAnswerTooLarge (io.LimitReader's EOF would read as a truncated
// answer).
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// tail returns the last max bytes of s.
func tail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return "…" + s[len(s)-max:]
}
