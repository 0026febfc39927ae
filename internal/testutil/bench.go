package testutil

import (
	"sync"
	"sync/atomic"
	"testing"
)

// RunParallel runs op b.N times on exactly workers goroutines (a
// benchmark's concurrent clients; testing.B.RunParallel only scales with
// GOMAXPROCS), timing only that, and fails b with the first error. After
// an error the remaining ops are skipped, not run.
func RunParallel(b *testing.B, workers int, op func() error) {
	b.Helper()
	var (
		wg     sync.WaitGroup
		once   sync.Once
		first  error
		failed atomic.Bool
	)
	work := make(chan struct{})
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				if failed.Load() {
					continue
				}
				if err := op(); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		}()
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
}
