package podnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// PoolSize is how many namespaces, lo up, a Manager with a PoolDir keeps
// made ahead: making one (unshare, bind mount, lo up) is the largest part
// of a create that is not the plugin's, and taking one is a bind mount.
const PoolSize = 4

// netnsPool holds namespaces made ahead in its dir, each a file named by
// a fresh uuid. Taking one starts a refill in the background; a create
// that finds the pool empty makes its own. Nothing in the pool is
// journaled: a kurmad killed with namespaces in it leaves them to the next
// one's New, which clears the dir.
type netnsPool struct {
	dir string
	log logrus.FieldLogger

	mu      sync.Mutex
	ready   []string // made namespaces
	filling bool     // a refill runs
	closed  bool     // Drain ran: no refill starts
	idle    *sync.Cond
}

// newNetnsPool clears dir of what a previous kurmad left, and fills it.
func newNetnsPool(dir string, log logrus.FieldLogger) (*netnsPool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("netns pool: %w", err)
	}
	p := &netnsPool{dir: dir, log: log}
	p.idle = sync.NewCond(&p.mu)
	if err := p.clear(); err != nil {
		return nil, err
	}
	p.fill()
	return p, nil
}

// clear removes every entry of the pool's dir: unmounted, not flushed
// (Unbind, not Remove): a namespace of the pool holds lo alone, and dies
// with its mount.
func (p *netnsPool) clear() error {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return fmt.Errorf("netns pool: %w", err)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, netnsfile.Unbind(filepath.Join(p.dir, e.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netns pool: %w", err)
	}
	return nil
}

// take puts a namespace of the pool on path and starts a refill; false
// when the pool had none (or the one it had would not move), and the
// caller makes its own.
func (p *netnsPool) take(path string) bool {
	p.mu.Lock()
	var src string
	if n := len(p.ready); n > 0 {
		src = p.ready[n-1]
		p.ready = p.ready[:n-1]
	}
	if !p.filling && !p.closed {
		p.filling = true
		go p.refill()
	}
	p.mu.Unlock()
	if src == "" {
		return false
	}
	if err := netnsfile.Move(src, path); err != nil {
		p.log.WithError(err).Warn("netns pool: cannot take a namespace; making one")
		_ = netnsfile.Unbind(src)
		return false
	}
	return true
}

// refill makes namespaces until the pool holds PoolSize or Drain ran.
func (p *netnsPool) refill() {
	p.fill()
	p.mu.Lock()
	p.filling = false
	p.idle.Broadcast()
	p.mu.Unlock()
}

// fill makes namespaces, one at a time, until the pool holds PoolSize or
// is closed; a failure stops it (the next take tries again).
func (p *netnsPool) fill() {
	for {
		p.mu.Lock()
		full := p.closed || len(p.ready) >= PoolSize
		p.mu.Unlock()
		if full {
			return
		}
		path := filepath.Join(p.dir, uuid.NewString())
		err := netnsfile.Create(path)
		if err == nil {
			err = netnsfile.LoopbackUp(path)
		}
		if err != nil {
			p.log.WithError(err).Warn("netns pool: cannot make a namespace")
			_ = netnsfile.Unbind(path)
			return
		}
		p.mu.Lock()
		p.ready = append(p.ready, path)
		p.mu.Unlock()
	}
}

// drain stops refills, waits for the one under way and removes every
// namespace the pool holds.
func (p *netnsPool) drain() error {
	p.mu.Lock()
	p.closed = true
	for p.filling {
		p.idle.Wait()
	}
	p.ready = nil
	p.mu.Unlock()
	return p.clear()
}
