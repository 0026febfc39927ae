package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// cycleResult is what a batch of create+delete cycles measured.
type cycleResult struct {
	creates, deletes dist
	elapsed          time.Duration
	failures         int
	firstErrs        []string
}

func (r cycleResult) podsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(len(r.deletes)) / r.elapsed.Seconds()
}

// podSeq numbers the pods cycles creates, across calls: a create whose
// client gave up (a cancelled load) may still hold its name while kurmad
// rolls it back, so no later call may reuse one.
var podSeq atomic.Int64

// cycles creates and deletes total pods on network with conc clients at a
// time, each client with its own connection, and times every request.
func cycles(ctx context.Context, d *daemon, network string, total, conc int) cycleResult {
	var (
		res  cycleResult
		mu   sync.Mutex
		next atomic.Int64
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		res.failures++
		if len(res.firstErrs) < 5 {
			res.firstErrs = append(res.firstErrs, err.Error())
		}
	}
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := api.NewClient(d.Socket)
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(total) {
					return
				}
				t0 := time.Now()
				pod, err := c.CreatePod(ctx, api.CreatePodRequest{Name: fmt.Sprintf("bench-%d", podSeq.Add(1)), Networks: []string{network}})
				tc := time.Since(t0)
				if err != nil {
					fail(fmt.Errorf("create: %w", err))
					continue
				}
				// A pod created is deleted even when ctx ends meanwhile (the
				// profile's and trace's loads are cancelled mid-cycle): left
				// behind, it would count as a leak and hold its name.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				t1 := time.Now()
				err = c.DeletePod(dctx, pod.ID)
				td := time.Since(t1)
				cancel()
				if err != nil {
					fail(fmt.Errorf("delete %s: %w", pod.ID, err))
					continue
				}
				mu.Lock()
				res.creates = append(res.creates, tc)
				res.deletes = append(res.deletes, td)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}
