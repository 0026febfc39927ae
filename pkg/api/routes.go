package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Route is one use of the API: a method and path (a net/http pattern),
// the query that selects the use when one path has several, what the
// request carries and what a success answers. routes is the one list of
// them (Routes returns a copy): the server routes by it, Client builds its
// requests from it and docs/api.md's table is checked against it
// (TestRoutesDocumented).
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

// The routes, each named for the use the client makes of it: Client
// builds every request from one of these (request), so a path is written
// once, here.
var (
	routeInfo              = Route{Method: "GET", Path: "/v1/info", Answer: "200 `Info`", handle: (*Server).info}
	routeListPods          = Route{Method: "GET", Path: "/v1/pods", Answer: "200 `[Pod]`", handle: (*Server).listPods}
	routeCreatePod         = Route{Method: "POST", Path: "/v1/pods", Body: "`CreatePod`", Answer: "201 `Pod`", handle: (*Server).createPod}
	routeGetPod            = Route{Method: "GET", Path: "/v1/pods/{id}", Answer: "200 `Pod`", handle: (*Server).getPod}
	routeDeletePod         = Route{Method: "DELETE", Path: "/v1/pods/{id}", Answer: "204", handle: (*Server).deletePod}
	routeRemovePod         = Route{Method: "DELETE", Path: "/v1/pods/{id}", Query: "force=true", Answer: "200 `PodRemoval`"}
	routeCheckPod          = Route{Method: "GET", Path: "/v1/pods/{id}/check", Answer: "200 `Pod` with `check`", handle: (*Server).checkPod}
	routePodCalls          = Route{Method: "GET", Path: "/v1/pods/{id}/calls", Answer: "200 `[PluginCall]`", handle: (*Server).podCalls}
	routeFindPods          = Route{Method: "GET", Path: "/v1/pods", Query: "container_id=C", Answer: "200 `[Pod]`"}
	routeDeleteRuntimePods = Route{Method: "DELETE", Path: "/v1/pods", Query: "container_id=C", Answer: "200 `{\"deleted\": [id]}`", handle: (*Server).deleteRuntimePods}
	routeGCRuntimePods     = Route{Method: "POST", Path: "/v1/pods/gc", Body: "`GC`", Answer: "200 `{\"deleted\": [id]}`", handle: (*Server).gcRuntimePods}
	routeNetworks          = Route{Method: "GET", Path: "/v1/networks", Answer: "200 `[Generation]`", handle: (*Server).networks}
	routeProbeNetworks     = Route{Method: "GET", Path: "/v1/networks", Query: "probe=N", Answer: "200 `[Generation]`, network N's plugins asked for their status first"}
	routeWaitNetworks      = Route{Method: "GET", Path: "/v1/networks", Query: "wait=R", Answer: "200 `[Generation]` once their revision (header `Kurma-Revision`) is not R"}
	routeRetryNetwork      = Route{Method: "POST", Path: "/v1/networks/{name}/retry", Answer: "200 `[Generation]`", handle: (*Server).retryNetwork}
	routeReload            = Route{Method: "POST", Path: "/v1/reload", Answer: "200 `ReloadResult`", handle: (*Server).reload}
	routeDryRunReload      = Route{Method: "POST", Path: "/v1/reload", Query: "dry_run=true", Answer: "200 `ReloadResult` with `dry_run`, nothing applied"}
	routeImages            = Route{Method: "GET", Path: "/v1/images", Answer: "200 `[Image]`", handle: (*Server).images}
	routePullImage         = Route{Method: "POST", Path: "/v1/images", Body: "`{\"uri\": \"...\"}`", Answer: "200 `Image`, or a stream", handle: (*Server).pullImage}
	routeRemoveImage       = Route{Method: "DELETE", Path: "/v1/images/{id}", Answer: "204", handle: (*Server).removeImage}
)

// routes are the API's routes, in the order the docs list them: the one
// list the server routes by and the docs are checked against.
var routes = []Route{
	routeInfo, routeListPods, routeCreatePod, routeGetPod, routeDeletePod, routeRemovePod, routeCheckPod,
	routePodCalls, routeFindPods, routeDeleteRuntimePods, routeGCRuntimePods, routeNetworks,
	routeProbeNetworks, routeWaitNetworks, routeRetryNetwork, routeReload, routeDryRunReload, routeImages, routePullImage,
	routeRemoveImage,
}

// Routes returns the API's routes, in the order the docs list them: a copy
// of the one list.
func Routes() []Route { return slices.Clone(routes) }

// request is where a call of r goes: r's method, and r's path with each
// {var} replaced by the next of vars (path-escaped) and the query of r's
// fixed values (force=true) with query's set over them. A route whose
// Query has a placeholder (container_id=C) takes its value from query.
func (r Route) request(query url.Values, vars ...string) target {
	segs := strings.Split(r.Path, "/")
	for i, seg := range segs {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			if len(vars) == 0 {
				panic(fmt.Sprintf("api: %s: no value for %s", r, seg))
			}
			segs[i], vars = url.PathEscape(vars[0]), vars[1:]
		}
	}
	if len(vars) != 0 {
		panic(fmt.Sprintf("api: %s: %d values left over", r, len(vars)))
	}
	q, _ := url.ParseQuery(r.Query)
	for k, v := range query {
		q[k] = v
	}
	path := strings.Join(segs, "/")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return target{method: r.Method, path: path}
}

// target is one request's method and URL path (with its query).
type target struct{ method, path string }

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
	for _, r := range routes {
		if r.handle != nil {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// route registers every route that holds a handler on m.
func (s *Server) route(m *http.ServeMux) {
	for _, r := range routes {
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
