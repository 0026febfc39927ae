package podnet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kurma-project/kurma/pkg/state"
)

// retrier holds the pods whose teardown did not finish and when each is
// tried again: from base after the first failure, doubling up to max.
type retrier struct {
	base, max time.Duration

	mu      sync.Mutex
	pending map[string]*retryEntry // by pod id
	wake    chan struct{}
}

type retryEntry struct {
	next     time.Time
	failures int
	running  bool
}

func newRetrier(base, maxDelay time.Duration) *retrier {
	if base <= 0 {
		base = time.Second
	}
	if maxDelay <= 0 {
		maxDelay = 5 * time.Minute
	}
	return &retrier{base: base, max: max(maxDelay, base), pending: map[string]*retryEntry{}, wake: make(chan struct{}, 1)}
}

// failed schedules pod id's next attempt after one more failure.
func (r *retrier) failed(id string) {
	r.mu.Lock()
	e := r.pending[id]
	if e == nil {
		e = &retryEntry{}
		r.pending[id] = e
	}
	delay := r.base << min(e.failures, 30)
	if delay > r.max || delay <= 0 {
		delay = r.max
	}
	e.failures++
	e.next = time.Now().Add(delay)
	r.mu.Unlock()
	r.poke()
}

// drop forgets pod id: its teardown finished (or it is gone).
func (r *retrier) drop(id string) {
	r.mu.Lock()
	delete(r.pending, id)
	r.mu.Unlock()
}

func (r *retrier) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// due returns the pods due now, marked running, and when the next one
// that is not is due (zero when none is waiting).
func (r *retrier) due(now time.Time) (ids []string, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, e := range r.pending {
		switch {
		case e.running:
		case !e.next.After(now):
			e.running = true
			ids = append(ids, id)
		case next.IsZero() || e.next.Before(next):
			next = e.next
		}
	}
	return ids, next
}

func (r *retrier) finished(id string) {
	r.mu.Lock()
	if e := r.pending[id]; e != nil {
		e.running = false
	}
	r.mu.Unlock()
	r.poke()
}

// kick makes every teardown waiting for a retry due now, and runs the gcs
// that wait: RunRetries calls it when a generation starts running
// (Networks.Started), which dels and gcs may have waited for.
func (m *Manager) kick() {
	r := m.retries
	r.mu.Lock()
	now := time.Now()
	for _, e := range r.pending {
		e.next = now
	}
	r.mu.Unlock()
	r.poke()
}

// Pending returns how many pods wait for their teardown to be tried again.
func (m *Manager) Pending() int {
	m.retries.mu.Lock()
	defer m.retries.mu.Unlock()
	return len(m.retries.pending)
}

// RunRetries tries again, until ctx ends, every teardown that did not
// finish (a Delete, a Create's rollback, Reconcile's or an earlier retry's),
// each pod when its backoff expires or at once when a generation starts
// running (Networks.Started); and runs the gcs that wait for their
// networks' plugin containers (see GC), at once then too.
//
// It returns once every teardown and gc it started has returned.
func (m *Manager) RunRetries(ctx context.Context) {
	r := m.retries
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	// Asked again only once it fired: a generation that starts while the
	// loop works is seen at the next wait.
	started := m.opts.Networks.Started()
	for {
		ids, next := r.due(time.Now())
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer r.finished(id)
				m.retryTeardown(ctx, id)
			}()
		}
		if len(m.WaitingGCs()) > 0 {
			m.gcRun.start(&wg, func() { m.runWaitingGCs(ctx) })
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		// Go 1.23 timers: Reset drops a value the timer sent and nobody
		// received, so no Stop-and-drain is needed after a wake.
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		case <-started:
			started = m.opts.Networks.Started()
			m.kick()
		}
	}
}

// retryTeardown tries pod id's teardown again.
func (m *Manager) retryTeardown(ctx context.Context, id string) {
	if ctx.Err() != nil {
		return
	}
	unlock := m.lockPod(id)
	defer unlock()
	rec, err := m.opts.Store.GetPod(id)
	if errors.Is(err, state.ErrNotFound) {
		m.retries.drop(id)
		return
	}
	log := m.log.WithFields(map[string]any{"pod": id, "op": "retry"})
	if err != nil {
		log.WithError(err).Error("cannot read the pod to retry its teardown")
		m.retries.failed(id)
		return
	}
	if err := m.teardown(ctx, rec, "retry"); err != nil {
		log.WithError(err).Warn("teardown still incomplete; trying again later")
		return
	}
	log.Info("teardown finished on retry")
}
