package api

import (
	"fmt"
	"net/http"
)

// Route is one use of the API: a method and path (a net/http pattern),
// the query that selects the use when one path has several, what the
// request carries and what a success answers. Routes is the one list of
// them: the server routes by it and docs/api.md's table is checked
// against it (TestRoutesDocumented).
type Route struct {
	Method, Path string
	// Query is the query string of a use the handler of Method Path
	// tells apart (DELETE /v1/pods/{id}?force=true); "" for the plain
	// use. One use of each Method Path holds the handler.
	Query  string
	Body   string // the request's body, as the docs name it; "" for none
	Answer string // the success answer, as the docs name it
	handle func(*Server, http.ResponseWriter, *http.Request)
}

// Routes are the API's routes, in the order the docs list them.
var Routes = []Route{
	{Method: "GET", Path: "/v1/info", Answer: "200 `Info`", handle: (*Server).info},
	{Method: "GET", Path: "/v1/pods", Answer: "200 `[Pod]`", handle: (*Server).listPods},
	{Method: "POST", Path: "/v1/pods", Body: "`CreatePod`", Answer: "201 `Pod`", handle: (*Server).createPod},
	{Method: "GET", Path: "/v1/pods/{id}", Answer: "200 `Pod`", handle: (*Server).getPod},
	{Method: "DELETE", Path: "/v1/pods/{id}", Answer: "204", handle: (*Server).deletePod},
	{Method: "DELETE", Path: "/v1/pods/{id}", Query: "force=true", Answer: "200 `PodRemoval`"},
	{Method: "GET", Path: "/v1/pods/{id}/check", Answer: "200 `Pod` with `check`", handle: (*Server).checkPod},
	{Method: "GET", Path: "/v1/pods/{id}/calls", Answer: "200 `[PluginCall]`", handle: (*Server).podCalls},
	{Method: "GET", Path: "/v1/pods", Query: "container_id=C", Answer: "200 `[Pod]`"},
	{Method: "DELETE", Path: "/v1/pods", Query: "container_id=C", Answer: "200 `{\"deleted\": [id]}`", handle: (*Server).deleteRuntimePods},
	{Method: "POST", Path: "/v1/pods/gc", Body: "`GC`", Answer: "200 `{\"deleted\": [id]}`", handle: (*Server).gcRuntimePods},
	{Method: "GET", Path: "/v1/networks", Answer: "200 `[Generation]`", handle: (*Server).networks},
	{Method: "GET", Path: "/v1/networks", Query: "probe=N", Answer: "200 `[Generation]`, network N's plugins asked for their status first"},
	{Method: "GET", Path: "/v1/networks", Query: "wait=R", Answer: "200 `[Generation]` once their revision (header `Kurma-Revision`) is not R"},
	{Method: "POST", Path: "/v1/networks/{name}/retry", Answer: "200 `[Generation]`", handle: (*Server).retryNetwork},
	{Method: "POST", Path: "/v1/reload", Answer: "200 `ReloadResult`", handle: (*Server).reload},
	{Method: "POST", Path: "/v1/reload", Query: "dry_run=true", Answer: "200 `ReloadResult` with `dry_run`, nothing applied"},
	{Method: "GET", Path: "/v1/images", Answer: "200 `[Image]`", handle: (*Server).images},
	{Method: "POST", Path: "/v1/images", Body: "`{\"uri\": \"...\"}`", Answer: "200 `Image`, or a stream", handle: (*Server).pullImage},
	{Method: "DELETE", Path: "/v1/images/{id}", Answer: "204", handle: (*Server).removeImage},
}

// String is the route as the docs name it: "GET /v1/pods?container_id=C".
func (r Route) String() string {
	s := r.Method + " " + r.Path
	if r.Query != "" {
		s += "?" + r.Query
	}
	return s
}

// TableRow is the route's row in docs/api.md's table of routes.
func (r Route) TableRow() string {
	body := r.Body
	if body == "" {
		body = "–"
	}
	return fmt.Sprintf("| `%s` | %s | %s |", r, body, r.Answer)
}

// Patterns are the API's routes as the "METHOD /path/{var}" patterns the
// server registers, each once: the route label of ServerOptions.OnRequest.
func Patterns() []string {
	var out []string
	for _, r := range Routes {
		if r.handle != nil {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// route registers every route that holds a handler on m.
func (s *Server) route(m *http.ServeMux) {
	for _, r := range Routes {
		if r.handle == nil {
			continue // served by the handler of its plain use
		}
		h := r.handle
		m.HandleFunc(r.Method+" "+r.Path, func(w http.ResponseWriter, req *http.Request) {
			if u, ok := w.(*unrouted); ok {
				u.served = true
				w = u.routed
			}
			h(s, w, req)
		})
	}
}
