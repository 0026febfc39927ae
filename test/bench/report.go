package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// dist is a set of timings.
type dist []time.Duration

// pct is the nearest-rank percentile p (0–100).
func (d dist) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return s[i]
}

func (d dist) median() time.Duration { return d.pct(50) }

// row is one line of a table.
type row struct {
	metric             string
	p50, p90, p99      string
	anchor, ratio, tgt string
	met                string
}

// table is one section's output.
type table struct {
	title string
	rows  []row
	notes []string
}

func (t *table) add(r row) { t.rows = append(t.rows, r) }
func (t *table) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

// distRow fills the percentile columns of a timing row.
func distRow(metric string, d dist) row {
	if len(d) == 0 {
		return row{metric: metric, p50: "-", p90: "-", p99: "-"}
	}
	return row{metric: fmt.Sprintf("%s (n=%d)", metric, len(d)), p50: ms(d.pct(50)), p90: ms(d.pct(90)), p99: ms(d.pct(99))}
}

// vsFloor fills anchor, ratio, target and met? of r against the floor's
// p50 and p99; the target is on p50 (issue 13's goals are medians: p99
// of 200 samples on a shared 2-core machine is one noisy sample).
func vsFloor(r row, d, floor dist, anchorName string, limit float64) row {
	if len(d) == 0 || len(floor) == 0 {
		return r
	}
	r50 := ratio(d.pct(50), floor.pct(50))
	r99 := ratio(d.pct(99), floor.pct(99))
	r.anchor = fmt.Sprintf("%s %s/%s", anchorName, ms(floor.pct(50)), ms(floor.pct(99)))
	r.ratio = fmt.Sprintf("%.2f×/%.2f×", r50, r99)
	if limit > 0 { // 0: a row that carries no goal
		r.tgt = fmt.Sprintf("≤%.2f× p50", limit)
		r.met = yesNo(r50 <= limit)
	}
	return r
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func (t *table) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s\n", t.title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tp50\tp90\tp99\tanchor\tratio\ttarget\tmet?")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range t.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.metric, dash(r.p50), dash(r.p90), dash(r.p99),
			dash(r.anchor), dash(r.ratio), dash(r.tgt), dash(r.met))
	}
	tw.Flush()
	for _, n := range t.notes {
		fmt.Fprintf(w, "  note: %s\n", strings.ReplaceAll(n, "\n", "\n        "))
	}
}
