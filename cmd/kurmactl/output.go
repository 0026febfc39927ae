package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/kurma-project/kurma/pkg/api"
)

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(api.Answer(v), "", "  ")
	if err != nil {
		return fmt.Errorf("encoding output: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table writes tab-separated rows aligned in columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cleanCell(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// cleanCell keeps server-provided text from breaking the table.
func cleanCell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// shortID abbreviates image IDs ("sha512-0123456789ab") for tables.
func shortID(id string) string {
	algo, hex, ok := strings.Cut(id, "-")
	if !ok || len(hex) <= 12 {
		return id
	}
	return algo + "-" + hex[:12]
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// age renders how long ago t was, like "3m ago".
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// cniSummary is what tables show of a CNI 1.1.0 result.
type cniSummary struct {
	IPs []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	} `json:"ips"`
}

func resultAddresses(a api.Attachment) (addrs, gateways []string) {
	var r cniSummary
	if len(a.Result) == 0 || json.Unmarshal(a.Result, &r) != nil {
		return nil, nil
	}
	for _, ip := range r.IPs {
		if ip.Address != "" {
			addrs = append(addrs, ip.Address)
		}
		if ip.Gateway != "" {
			gateways = append(gateways, ip.Gateway)
		}
	}
	return addrs, gateways
}
