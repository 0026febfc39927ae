package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// listing is the section of kurmad's reads and its journal at scale:
// the journal's fsyncs per create+delete (from kurmad's metrics), attach
// with no pod held and with o.listPods held, each against the floor (libcni
// with the same plugins) holding as many pods of its own (sequential
// create+delete, the two sides interleaved in blocks, the same cycles
// before and after the pods are made), and GET /v1/pods and /v1/info with
// o.listPods pods: the pods are created at 16 clients, the GETs timed one
// at a time, then the pods deleted.
func (b *bench) listing(d *daemon) error {
	o, ctx := b.o, b.ctx
	progress("list: attach with none and %d pods held a side, then %d GETs of /v1/pods and /v1/info", o.listPods, o.listGets)
	const n, block, warmup = 60, 10, 5
	jt := &table{title: fmt.Sprintf("The journal and attach at scale (%d sequential create+delete cycles a side, interleaved with the floor in blocks of %d; 16 clients for the %d pods)", n, block, o.listPods)}
	// The floor holds its pods apart from the attach section's floor, with
	// the same config on a bridge of its own: a Linux bridge takes at most
	// 1024 ports, and each side holds its own as many pods.
	fl, err := newFloor(filepath.Join(o.images, "bin"), b.aci, filepath.Join(b.dir, "floor-held"), benchNets[1])
	if err != nil {
		return fmt.Errorf("list: floor: %w", err)
	}
	next := 0
	for range warmup {
		if _, err := fl.once(ctx, next); err != nil {
			return fmt.Errorf("list: floor warm-up: %w", err)
		}
		next++
	}
	if r := cycles(ctx, d, benchNets[0].Name, warmup, 1); r.failures > 0 {
		return fmt.Errorf("list: kurmad warm-up: %s", strings.Join(r.firstErrs, "; "))
	}
	s0, ok := d.journalSyncs(ctx)
	empty, err := interleave(ctx, fl, d, benchNets[0].Name, 0, n, block, &next)
	if err != nil {
		return err
	}
	s1, _ := d.journalSyncs(ctx)
	ids, err := createPods(ctx, d, benchNets[0].Name, o.listPods, 16)
	s2, _ := d.journalSyncs(ctx)
	deleted := false
	defer func() {
		if deleted {
			return
		}
		if err := deletePods(context.WithoutCancel(ctx), d, ids, 16); err != nil {
			progress("list: %v", err)
		}
	}()
	if err != nil {
		return err
	}
	floorHeld, err := fl.hold(ctx, heldBase, o.listPods, 16)
	defer func() {
		if err := fl.release(context.WithoutCancel(ctx), floorHeld, 16); err != nil {
			progress("list: floor: %v", err)
		}
	}()
	if err != nil {
		return fmt.Errorf("list: floor holding %d pods: %w", o.listPods, err)
	}
	held, err := interleave(ctx, fl, d, benchNets[0].Name, 0, n, block, &next)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", d.Socket)
		},
	}}
	defer hc.CloseIdleConnections()
	t := &table{title: fmt.Sprintf("API reads with %d pods (ms, request to last byte of the body)", len(ids))}
	for _, path := range []string{"/v1/pods", "/v1/info"} {
		var times dist
		size := 0
		for i := 0; i < o.listGets+2; i++ {
			took, n, err := timedGet(ctx, hc, path)
			if err != nil {
				return err
			}
			if i >= 2 { // the first two warm the connection and caches
				times, size = append(times, took), n
			}
		}
		r := distRow(fmt.Sprintf("GET %s (%d KiB)", path, size>>10), times)
		if path == "/v1/pods" {
			r.tgt, r.met = "≤"+ms(listGoal)+" p50", yesNo(times.median() <= listGoal)
		}
		t.add(r)
	}
	s3, _ := d.journalSyncs(ctx)
	deleted = true
	if err := deletePods(ctx, d, ids, 16); err != nil {
		return err
	}
	s4, _ := d.journalSyncs(ctx)

	if ok {
		per := func(n, of float64) string { return fmt.Sprintf("%.2f", n/of) }
		jt.add(row{metric: "journal fsyncs per create+delete, 1 client", p50: per(s1-s0, n), tgt: "≤1 (8 before the log)"})
		jt.add(row{metric: fmt.Sprintf("journal fsyncs per create, 16 clients (%d pods)", len(ids)), p50: per(s2-s1, float64(len(ids)))})
		jt.add(row{metric: fmt.Sprintf("journal fsyncs per delete, 16 clients (%d pods)", len(ids)), p50: per(s4-s3, float64(len(ids)))})
	} else {
		jt.note("kurmad serves no journal metrics: fsync rows skipped")
	}
	heldRows(jt, empty, held, len(ids), len(floorHeld))
	jt.print(os.Stdout)
	t.print(os.Stdout)
	return nil
}

// heldBase is where the floor's held pods' indexes start: far above any
// cycle's, so their netns names and container ids never meet.
const heldBase = 1 << 20

// heldRows are attach and detach with no pod held and with the pods held,
// kurmad against the floor each time, and how much each side grew: the
// floor's growth is the plugins' and the kernel's (host-local reads every
// lease of its network on each add), kurmad's beyond it its own.
func heldRows(t *table, empty, held *sideBySide, kurmadPods, floorPods int) {
	for _, s := range []struct {
		name string
		side *sideBySide
		pods int
	}{{"no pod held", empty, 0}, {fmt.Sprintf("%d pods held a side", kurmadPods), held, kurmadPods}} {
		t.add(vsFloor(distRow("attach: POST /v1/pods vs netns+add, "+s.name, s.side.lat.creates), s.side.lat.creates, s.side.netnsAdd, "netns+add", attachGoal))
		t.add(vsFloor(distRow("detach: DELETE vs del+netns rm, "+s.name, s.side.lat.deletes), s.side.lat.deletes, s.side.delRm, "del+rm", attachGoal))
		own, cont := s.side.kurmadPerCycle()[0], s.side.kurmadPerCycle()[1]
		fc := s.side.floorPerCycle()
		if s.side.cpuErr == nil && fc > 0 {
			t.add(row{metric: "CPU per create+delete, " + s.name, p50: ms(own + cont), anchor: ms(fc),
				ratio: fmt.Sprintf("%.2f×", float64(own+cont)/float64(fc))})
		}
	}
	grow := func(a, b dist) string {
		return fmt.Sprintf("+%s (%.2f×)", ms(b.median()-a.median()), float64(b.median())/float64(max(a.median(), 1)))
	}
	t.add(row{metric: "attach growth with the pods held: kurmad", p50: grow(empty.lat.creates, held.lat.creates)})
	t.add(row{metric: "attach growth with the pods held: floor netns+add", p50: grow(empty.netnsAdd, held.netnsAdd)})
	t.add(row{metric: "  of which the floor's add (libcni: bridge + host-local)", p50: grow(empty.add, held.add)})
	t.add(row{metric: "detach growth with the pods held: kurmad", p50: grow(empty.lat.deletes, held.lat.deletes)})
	t.add(row{metric: "detach growth with the pods held: floor del+netns rm", p50: grow(empty.delRm, held.delRm)})
	t.note("the floor holds %d pods of its own (netns + libcni add, the same config on bridge %s, its own host-local data dir) while kurmad holds %d on %s: each side adds to a bridge of as many ports, and host-local reads a data dir of as many leases", floorPods, benchNets[1].Bridge, kurmadPods, benchNets[0].Bridge)
	t.note("each pass interleaved: %s", "floor block, kurmad block, ..., the same as the attach/detach rows; the growth rows are p50 held − p50 none")
}

// journalSyncs reads from kurmad's metrics how many fdatasyncs and fsyncs
// its journal made: kurma_journal_syncs_total, or, from a kurmad of the
// bbolt journal (whose every commit made two), twice
// kurma_journal_commit_duration_seconds_count. ok is false when kurmad
// serves neither.
func (d *daemon) journalSyncs(ctx context.Context) (float64, bool) {
	body, err := d.metricsGet(ctx)
	if err != nil {
		return 0, false
	}
	var commits float64
	found := false
	for _, l := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			continue
		}
		switch name {
		case "kurma_journal_syncs_total":
			return f, true
		case "kurma_journal_commit_duration_seconds_count":
			commits, found = 2*f, true
		}
	}
	return commits, found
}

// metricsGet scrapes kurmad's metrics socket (newDaemon sets it).
func (d *daemon) metricsGet(ctx context.Context) ([]byte, error) {
	sock := filepath.Join(filepath.Dir(d.pprofSock), "metrics.sock")
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sock)
		},
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://kurmad/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// timedGet GETs path and reads the whole body.
func timedGet(ctx context.Context, hc *http.Client, path string) (time.Duration, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://kurmad"+path, nil)
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	took := time.Since(t0)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return took, int(n), err
}

// createPods creates total pods on network with conc clients and returns
// the IDs of those it made (also on error).
func createPods(ctx context.Context, d *daemon, network string, total, conc int) ([]string, error) {
	return forEach(ctx, total, conc, func(c *api.Client, i int) (string, error) {
		p, err := c.CreatePod(ctx, api.CreatePodRequest{Name: fmt.Sprintf("list-%d", i), Networks: []string{network}})
		if err != nil {
			return "", err
		}
		return p.ID, nil
	}, d.Socket)
}

// deletePods deletes the pods ids with conc clients.
func deletePods(ctx context.Context, d *daemon, ids []string, conc int) error {
	_, err := forEach(ctx, len(ids), conc, func(c *api.Client, i int) (string, error) {
		return "", c.DeletePod(ctx, ids[i])
	}, d.Socket)
	return err
}

// forEach calls f for 0..total-1 with conc clients, collecting the
// non-empty strings it returns and its first error.
func forEach(ctx context.Context, total, conc int, f func(*api.Client, int) (string, error), socket string) ([]string, error) {
	var (
		mu    sync.Mutex
		out   []string
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := api.NewClient(socket)
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				s, err := f(c, i)
				mu.Lock()
				if s != "" {
					out = append(out, s)
				}
				if err != nil && first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return out, first
}
