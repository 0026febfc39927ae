package testutil

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Poll calls cond until it returns nil, and then returns nil. cond's error
// says why the condition does not hold yet; when timeout passes (or ctx
// ends) first, Poll returns an error naming what it waited for and wrapping
// cond's last answer. Calls are 5ms apart at first, then back off to 100ms,
// so a condition that holds soon is seen soon and a slow one costs little.
//
// It is for conditions no event announces (a process gone from /proc, a
// state read over the API); where something does announce it (a log line,
// a closed channel), wait for that instead.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	interval := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			if err := cond(); err == nil {
				return nil
			}
			return fmt.Errorf("waited %v for %s: %w", timeout, what, err)
		case <-timer.C:
		}
		interval = min(2*interval, 100*time.Millisecond)
	}
}

// WaitFor is Poll for a test: t fails (and stops) with Poll's error when
// cond does not hold within timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(context.Background(), timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}
