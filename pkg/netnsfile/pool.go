package netnsfile

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Pool keeps a few network namespaces made ahead, with lo up, so that a
// pod's create only binds one at its path (Create): making a namespace
// and bringing lo up is off the create's critical path, refilled in the
// background after each take. The pool's namespaces are open descriptors
// only, never files: a kurmad that dies takes them along, and a boot has
// nothing of the pool's to sweep.
//
// A Pool of size 0 keeps none: Create makes each namespace as it is asked
// for, the same way. A Pool is safe for concurrent use.
type Pool struct {
	size int

	mu      sync.Mutex
	free    []*os.File
	filling bool // a refill is under way
	closed  bool
	idle    sync.WaitGroup // the refill goroutine, for Close
}

// NewPool returns a pool that keeps size namespaces ready; it starts
// filling at once, in the background.
func NewPool(size int) *Pool {
	p := &Pool{size: max(size, 0)}
	p.mu.Lock()
	p.refillLocked()
	p.mu.Unlock()
	return p
}

// Create binds a new network namespace with lo up at path, which must not
// exist: one of the pool's, or, when none is ready, one made now.
func (p *Pool) Create(path string) error {
	f := p.take()
	if f == nil {
		fs, err := makeNamespaces(1)
		if err != nil {
			return fmt.Errorf("netns %s: %w", path, err)
		}
		f = fs[0]
	}
	defer f.Close()
	return bindFile(f, "a new namespace", path)
}

// Ready is how many namespaces the pool holds now.
func (p *Pool) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Close waits for a refill under way and releases every namespace the
// pool holds (the kernel destroys them: nothing else refers to them).
// Create still works afterwards, without the pool.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.idle.Wait()
	p.mu.Lock()
	free := p.free
	p.free = nil
	p.mu.Unlock()
	for _, f := range free {
		f.Close()
	}
}

// take returns a ready namespace (nil: none) and starts a refill.
func (p *Pool) take() *os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	var f *os.File
	if n := len(p.free); n > 0 {
		f = p.free[n-1]
		p.free = p.free[:n-1]
	}
	p.refillLocked()
	return f
}

// refillLocked starts a goroutine that makes namespaces until the pool is
// full, unless one runs or the pool is full or closed. p.mu is held.
func (p *Pool) refillLocked() {
	if p.filling || p.closed || len(p.free) >= p.size {
		return
	}
	p.filling = true
	p.idle.Add(1)
	go func() {
		defer p.idle.Done()
		for {
			p.mu.Lock()
			want := p.size - len(p.free)
			if p.closed || want <= 0 {
				p.filling = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			fs, err := makeNamespaces(want)
			p.mu.Lock()
			p.free = append(p.free, fs...)
			if err != nil {
				// Creates make their own until the next take tries again.
				p.filling = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
	}()
}

// makeNamespaces makes n new network namespaces with lo up, on one locked
// OS thread: it enters each as it makes it (unshare), opens it, brings lo
// up through a netlink socket it opens there, and goes back to its own
// namespace once, at the end. If it cannot go back it stays locked, so
// that the Go runtime ends the thread rather than reuse it. It returns the
// namespaces made before an error, with it.
func makeNamespaces(n int) ([]*os.File, error) {
	type result struct {
		fs  []*os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("current netns: %w", err)}
			return
		}
		defer orig.Close()
		var fs []*os.File
		for range n {
			var f *os.File
			if f, err = newLoopbackNamespace(); err != nil {
				break
			}
			fs = append(fs, f)
		}
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
			// Stay locked: the goroutine exits and the thread dies with it.
			ch <- result{fs, errors.Join(err, fmt.Errorf("restore original netns: %w", serr))}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{fs, err}
	}()
	r := <-ch
	return r.fs, r.err
}

// loIndex is lo's interface index, the same in every network namespace
// (the kernel's LOOPBACK_IFINDEX).
const loIndex = 1

// newLoopbackNamespace moves the calling (locked) thread into a new
// network namespace, brings its lo up and returns the namespace, opened.
func newLoopbackNamespace() (*os.File, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("unshare: %w", err)
	}
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open the new netns: %w", err)
	}
	// A socket belongs to the namespace of the thread that opens it.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	if err := h.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "lo", Index: loIndex}}); err != nil {
		f.Close()
		return nil, fmt.Errorf("set lo up: %w", err)
	}
	return f, nil
}
