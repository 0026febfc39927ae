package imagefetch

import (
	"context"
	"sync"
)

// flightGroup runs one fetch per key at a time; callers arriving while it
// runs wait for its result. The shared fetch is cancelled only when every
// waiting caller has given up.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightCall struct {
	done    chan struct{}
	img     *Image
	err     error
	waiters int
	cancel  context.CancelFunc
}

func (g *flightGroup) do(ctx context.Context, key string, fn func(context.Context) (*Image, error)) (*Image, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*flightCall{}
	}
	c, ok := g.calls[key]
	if !ok {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &flightCall{done: make(chan struct{}), cancel: cancel}
		g.calls[key] = c
		go func() {
			c.img, c.err = fn(runCtx)
			cancel()
			g.mu.Lock()
			delete(g.calls, key)
			g.mu.Unlock()
			close(c.done)
		}()
	}
	c.waiters++
	g.mu.Unlock()

	select {
	case <-c.done:
		return c.img, c.err
	case <-ctx.Done():
		g.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			c.cancel()
		}
		g.mu.Unlock()
		return nil, ctx.Err()
	}
}
