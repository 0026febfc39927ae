package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// listing is the section that times GET /v1/pods and /v1/info with
// o.listPods pods on kurmad: the pods are created at 16 clients, the GETs
// timed one at a time, then the pods deleted.
func (b *bench) listing(d *daemon) error {
	o, ctx := b.o, b.ctx
	progress("list: %d pods, then %d GETs of /v1/pods and /v1/info", o.listPods, o.listGets)
	ids, err := createPods(ctx, d, benchNets[0].Name, o.listPods, 16)
	defer func() {
		if err := deletePods(context.WithoutCancel(ctx), d, ids, 16); err != nil {
			progress("list: %v", err)
		}
	}()
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
	t.print(os.Stdout)
	return nil
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
