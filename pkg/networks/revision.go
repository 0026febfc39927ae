package networks

import (
	"strconv"
	"sync"
	"time"
)

// revision counts the changes of what Generations lists (but a fetch's
// progress), for those who wait for one (GET /v1/networks?wait=R).
type revision struct {
	mu   sync.Mutex
	boot string // tells this kurmad's revisions from an earlier one's
	n    uint64
	ch   chan struct{} // closed at the next change
}

// Revision is the revision of what Generations lists and a channel
// closed at its next change. Read it before Generations: a change
// between the two then shows as a new revision, never as one missed.
func (c *Controller) Revision() (string, <-chan struct{}) {
	r := &c.rev
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	return r.boot + "-" + strconv.FormatUint(r.n, 10), r.ch
}

// changed bumps the revision and wakes its waiters: a generation's state,
// reason or image changed, one appeared or went, or another serves.
func (c *Controller) changed() {
	r := &c.rev
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	r.n++
	close(r.ch)
	r.ch = make(chan struct{})
}

// init is the revision's start; r.mu is held.
func (r *revision) init() {
	if r.ch == nil {
		r.boot = strconv.FormatInt(time.Now().UnixNano(), 36)
		r.ch = make(chan struct{})
	}
}
