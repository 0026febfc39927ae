package api

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestRoutesDocumented: docs/api.md's table of routes is Routes, row for
// row (its rows are Route.TableRow: paste the wanted table on a change).
func TestRoutesDocumented(t *testing.T) {
	f, err := os.Open("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Routes"
			continue
		}
		if in && strings.HasPrefix(line, "| `") {
			got = append(got, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	want := make([]string, len(Routes))
	for i, r := range Routes {
		want[i] = r.TableRow()
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/api.md's table of routes differs from api.Routes; its rows should read:\n%s", strings.Join(want, "\n"))
	}
}

// TestEveryRouteServed: each route's method and path reach a handler, and
// each Method Path has exactly one use holding it.
func TestEveryRouteServed(t *testing.T) {
	holders := map[string]int{}
	for _, r := range Routes {
		if r.handle != nil {
			holders[r.Method+" "+r.Path]++
		}
	}
	for _, r := range Routes {
		if n := holders[r.Method+" "+r.Path]; n != 1 {
			t.Errorf("%s: %d uses of %s %s hold a handler, want 1", r, n, r.Method, r.Path)
		}
	}
}
