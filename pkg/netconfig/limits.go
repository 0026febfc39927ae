package netconfig

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// Keys of a network's "limits" and where each value goes.
var limitKeys = []struct {
	key   string
	size  bool // a size ("64Mi" or bytes) rather than a count
	field func(*gendef.Limits) *int64
}{
	{"pids", false, func(l *gendef.Limits) *int64 { return &l.Pids }},
	{"memory", true, func(l *gendef.Limits) *int64 { return &l.Memory }},
	{"call_pids", false, func(l *gendef.Limits) *int64 { return &l.CallPids }},
	{"call_memory", true, func(l *gendef.Limits) *int64 { return &l.CallMemory }},
	{"tmpfs", true, func(l *gendef.Limits) *int64 { return &l.Tmpfs }},
	{"writable_layer", true, func(l *gendef.Limits) *int64 { return &l.WritableLayer }},
	{"state_dir", true, func(l *gendef.Limits) *int64 { return &l.StateDir }},
}

// parseLimits reads a network's "limits".
func parseLimits(ps *problems, path string, raw json.RawMessage) gendef.Limits {
	var l gendef.Limits
	if jsonKind(raw) != "an object" {
		ps.add(path, fmt.Sprintf(`expected an object such as {"memory": "512Mi", "pids": 1024}, got %s`, jsonKind(raw)))
		return l
	}
	ms, err := decodeObject(raw)
	if err != nil {
		ps.add(path, fmt.Sprintf("invalid object: %v", err))
		return l
	}
	var known []string
	for _, k := range limitKeys {
		known = append(known, k.key)
	}
	for _, m := range ms {
		mp := path + "." + m.Key
		i := -1
		for j, k := range limitKeys {
			if k.key == m.Key {
				i = j
			}
		}
		if i < 0 {
			msg := "unknown limit"
			if s := suggest(m.Key, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else {
				msg += "; the limits are " + quotedList(known)
			}
			ps.add(mp, msg)
			continue
		}
		v, msg := parseLimit(m.Value, limitKeys[i].size)
		if least := leastTasks[m.Key]; msg == "" && v != gendef.NoLimit && v < least {
			msg = fmt.Sprintf("%d is too few: the plugin container's agent, its main executable and a call need at least %d; write %d or more, or 0 for no limit", v, least, least)
		}
		if msg != "" {
			ps.add(mp, msg)
			continue
		}
		*limitKeys[i].field(&l) = v
	}
	return l
}

// leastTasks are the least task limits a plugin container runs with:
// kurma-agent (a Go program: a few threads), the main executable and a
// call (a Go CNI plugin takes ~10). Below them the container fails to
// start, or calls fail to fork, with errors that name no limit (measured:
// pids 24 starts, but its first add cannot make a thread; call_pids 8
// fails every add).
var leastTasks = map[string]int64{"pids": 64, "call_pids": 32}

// parseLimit reads one limit: a whole number (0: no limit) or, for a size,
// a string with a binary suffix ("64Mi", "1Gi", "512Ki").
func parseLimit(raw json.RawMessage, size bool) (int64, string) {
	want := "a whole number (0 for no limit)"
	if size {
		want = `a size such as "64Mi", "1Gi" or a number of bytes (0 for no limit)`
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		var s string
		if !size || json.Unmarshal(raw, &s) != nil {
			return 0, fmt.Sprintf("expected %s, got %s", want, jsonKind(raw))
		}
		v, ok := parseSize(s)
		if !ok {
			return 0, fmt.Sprintf("%q is not a size; write it like \"64Mi\", \"1Gi\" or 67108864", s)
		}
		n = v
	}
	switch {
	case n < 0:
		return 0, fmt.Sprintf("%d must not be negative; 0 lifts the limit", n)
	case n == 0:
		return gendef.NoLimit, ""
	case size && n < 1<<20:
		return 0, fmt.Sprintf("%d bytes is less than 1Mi, too small for anything to run", n)
	}
	return n, ""
}

// parseSize reads "<n>", "<n>Ki", "<n>Mi" or "<n>Gi".
func parseSize(s string) (int64, bool) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}
