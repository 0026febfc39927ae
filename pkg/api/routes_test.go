package api

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	want := make([]string, len(Routes()))
	for i, r := range Routes() {
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
	for _, r := range Routes() {
		if r.handle != nil {
			holders[r.Method+" "+r.Path]++
		}
	}
	for _, r := range Routes() {
		if n := holders[r.Method+" "+r.Path]; n != 1 {
			t.Errorf("%s: %d uses of %s %s hold a handler, want 1", r, n, r.Method, r.Path)
		}
	}
}

// TestClientRequestsFromRoutes: the request Client makes of each route
// reaches that route's pattern on the server's mux, with its variables
// escaped and its fixed query kept.
func TestClientRequestsFromRoutes(t *testing.T) {
	mux := http.NewServeMux()
	for _, p := range Patterns() {
		mux.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	for _, r := range Routes() {
		var vars []string
		for range strings.Count(r.Path, "{") {
			vars = append(vars, "a b/c")
		}
		tg := r.request(url.Values{"extra": {"1"}}, vars...)
		req := httptest.NewRequest(tg.method, "http://kurmad"+tg.path, nil)
		if _, pattern := mux.Handler(req); pattern != r.Method+" "+r.Path {
			t.Errorf("%s: %s %s reaches %q", r, tg.method, tg.path, pattern)
		}
		q := req.URL.Query()
		fixed, _ := url.ParseQuery(r.Query)
		for k := range fixed {
			if q.Get(k) != fixed.Get(k) {
				t.Errorf("%s: %s has %s=%q", r, tg.path, k, q.Get(k))
			}
		}
		if q.Get("extra") != "1" {
			t.Errorf("%s: %s lost the caller's query", r, tg.path)
		}
	}
	for _, c := range []struct {
		got  target
		want string
	}{
		{routeGetPod.request(nil, "a/b"), "GET /v1/pods/a%2Fb"},
		{routeRemovePod.request(nil, "p1"), "DELETE /v1/pods/p1?force=true"},
		{routeFindPods.request(url.Values{"container_id": {"c1"}}), "GET /v1/pods?container_id=c1"},
		{routeRetryNetwork.request(nil, "mynet"), "POST /v1/networks/mynet/retry"},
	} {
		if got := c.got.method + " " + c.got.path; got != c.want {
			t.Errorf("request %q, want %q", got, c.want)
		}
	}
}
