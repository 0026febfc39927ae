package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Both sides of a goal row are measured in alternating blocks (block
// floor cycles, then block kurmad cycles, until each has its n): measured
// one whole phase after the other, the load of this shared machine moved
// between the phases and with it the ratios (the floor's netns+add p50
// from 7.9 to 10.4 ms across four runs while kurmad's barely moved).

// sideBySide is what the interleaved sequential pass measured: the floor's
// steps and kurmad's requests, and each side's CPU summed over its own
// blocks only.
type sideBySide struct {
	netns, add, del, rm, netnsAdd, delRm dist // floor, per step
	lat                                  cycleResult
	floorCPU                             time.Duration // bench process + children, floor blocks
	own, cont                            time.Duration // kurmad process, its containers' cgroup, kurmad blocks
	cpuErr                               error
}

// interleave warms both sides up, then runs n sequential cycles of each in
// alternating blocks of block cycles. The floor's index goes on from
// *next, so its netns names and container ids are never reused.
func interleave(ctx context.Context, fl *floor, d *daemon, network string, warmup, n, block int, next *int) (*sideBySide, error) {
	for i := 0; i < warmup; i++ {
		if _, err := fl.once(ctx, *next); err != nil {
			return nil, fmt.Errorf("floor warm-up: %w", err)
		}
		*next++
	}
	if r := cycles(ctx, d, network, warmup, 1); r.failures > 0 {
		return nil, fmt.Errorf("kurmad warm-up: %d failures: %s", r.failures, strings.Join(r.firstErrs, "; "))
	}
	s := &sideBySide{}
	for done := 0; done < n; done += block {
		k := min(block, n-done)
		if err := s.floorBlock(ctx, fl, k, next); err != nil {
			return nil, err
		}
		s.kurmadBlock(ctx, d, network, k)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return s, nil
}

// floorBlock runs k floor cycles; nothing else of the bench runs
// meanwhile, so the bench process's own and reaped children's CPU around
// it is the floor's.
func (s *sideBySide) floorBlock(ctx context.Context, fl *floor, k int, next *int) error {
	cpu0 := selfAndChildrenCPU()
	for j := 0; j < k; j++ {
		smp, err := fl.once(ctx, *next)
		*next++
		if err != nil {
			return fmt.Errorf("floor iteration %d: %w", *next-1, err)
		}
		s.netns = append(s.netns, smp.netns)
		s.add = append(s.add, smp.add)
		s.del = append(s.del, smp.del)
		s.rm = append(s.rm, smp.rmNetns)
		s.netnsAdd = append(s.netnsAdd, smp.netns+smp.add)
		s.delRm = append(s.delRm, smp.del+smp.rmNetns)
	}
	s.floorCPU += selfAndChildrenCPU() - cpu0
	return nil
}

// kurmadBlock runs k sequential kurmad cycles and adds kurmad's CPU
// (process and containers) around them.
func (s *sideBySide) kurmadBlock(ctx context.Context, d *daemon, network string, k int) {
	own0, cont0, err0 := daemonCPU(d)
	r := cycles(ctx, d, network, k, 1)
	own1, cont1, err1 := daemonCPU(d)
	s.lat = mergeCycles(s.lat, r)
	if err := errors.Join(err0, err1); err != nil {
		s.cpuErr = errors.Join(s.cpuErr, err)
		return
	}
	s.own += own1 - own0
	s.cont += cont1 - cont0
}

// mergeCycles is a and b as one batch (elapsed: the sum of both).
func mergeCycles(a, b cycleResult) cycleResult {
	a.creates = append(a.creates, b.creates...)
	a.deletes = append(a.deletes, b.deletes...)
	a.elapsed += b.elapsed
	a.failures += b.failures
	for _, e := range b.firstErrs {
		if len(a.firstErrs) < 5 {
			a.firstErrs = append(a.firstErrs, e)
		}
	}
	return a
}

// floorPerCycle and kurmadPerCycle are each side's CPU per create+delete.
func (s *sideBySide) floorPerCycle() time.Duration {
	return s.floorCPU / time.Duration(max(len(s.add), 1))
}

func (s *sideBySide) kurmadPerCycle() [2]time.Duration {
	n := time.Duration(max(len(s.lat.deletes), 1))
	return [2]time.Duration{s.own / n, s.cont / n}
}
