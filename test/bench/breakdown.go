package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// breakdown is where kurmad's time goes, from its own JSON log lines
// (debug level, so only debugPass's kurmad has them): the podnet totals
// and the plugin calls inside them.
type breakdown struct {
	created, attached  dist // "pod created" (podnet Create), "network attached" (the add call)
	deleted, detached  dist // "pod deleted" (podnet Delete), "network detached" (the del call)
	agentCalls         dist // networkpod "plugin call done" (exec agent round trip)
	linesRead, skipped int
}

// logOffset is the current size of path (where a later readBreakdown
// starts).
func logOffset(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readBreakdown parses kurmad's JSON log from offset on.
func readBreakdown(path string, offset int64) (breakdown, error) {
	var b breakdown
	f, err := os.Open(path)
	if err != nil {
		return b, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return b, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var rec struct {
			Msg      string  `json:"msg"`
			Duration float64 `json:"duration"` // time.Duration: nanoseconds
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Duration == 0 {
			b.skipped++
			continue
		}
		b.linesRead++
		d := time.Duration(rec.Duration)
		switch rec.Msg {
		case "pod created":
			b.created = append(b.created, d)
		case "network attached":
			b.attached = append(b.attached, d)
		case "pod deleted":
			b.deleted = append(b.deleted, d)
		case "network detached":
			b.detached = append(b.detached, d)
		case "plugin call done":
			b.agentCalls = append(b.agentCalls, d)
		}
	}
	return b, sc.Err()
}

// debugRun is the breakdown's own pass: a separate kurmad at debug level
// (JSON), whose log lines time each step. Debug logging costs kurmad CPU
// and latency that an operator at the default level does not pay, so the
// rows with goals time another kurmad, at -level; this pass's latencies
// and CPU are printed beside theirs, labelled, to show what debug costs.
type debugRun struct {
	lat    cycleResult
	bd     breakdown
	bdErr  error
	own    time.Duration // kurmad process CPU per cycle
	cpuErr error
}

// debugPass boots the debug-level kurmad on its own dirs (<tmp>/dbg),
// runs o.breakdownN sequential cycles after the warm-up, reads its log and
// shuts it down (pods deleted, cgroups and mounts removed) before the
// timed kurmad boots on the same bridge: that one's baseline, which the
// soak's leak counts compare against, holds nothing of this one.
func (b *bench) debugPass() (*debugRun, error) {
	o, ctx := b.o, b.ctx
	if o.breakdownN <= 0 {
		return nil, nil
	}
	progress("kurmad at debug level (breakdown): warm-up %d, then %d sequential create/delete", o.warmup, o.breakdownN)
	d, err := newDaemon(filepath.Join(o.bin, "kurmad"), filepath.Join(b.dir, "dbg"), b.aci, benchNets[:1])
	if err != nil {
		return nil, err
	}
	d.LogLevel, d.LogJSON = "debug", true
	b.cl.add(func() { shutdown(d) }) // a no-op unless this pass failed
	if err := d.Start(); err != nil {
		return nil, err
	}
	if _, err := d.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	net0 := benchNets[0].Name
	if r := cycles(ctx, d, net0, o.warmup, 1); r.failures > 0 {
		return nil, fmt.Errorf("debug pass warm-up: %d failures: %s", r.failures, strings.Join(r.firstErrs, "; "))
	}
	syncLog(d) // the warm-up's lines before the offset
	from := logOffset(d.LogPath)
	own0, _, cpuErr := daemonCPU(d)
	lat := cycles(ctx, d, net0, o.breakdownN, 1)
	own1, _, cpuErr1 := daemonCPU(d)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	syncLog(d)
	r := &debugRun{lat: lat, cpuErr: errors.Join(cpuErr, cpuErr1)}
	r.own = (own1 - own0) / time.Duration(max(len(lat.deletes), 1))
	r.bd, r.bdErr = readBreakdown(d.LogPath, from)
	shutdown(d)
	return r, nil
}
