package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"time"
)

// breakdown is where kurmad's time goes, from its own JSON log lines
// (debug level): the podnet totals and the plugin calls inside them.
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
