package testutil

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// KubeAPI is a Kubernetes API server for one Node: as much of the API as
// flanneld's kube subnet manager uses (list and watch nodes, get the node,
// patch it and its status), for tests of kurma's flannel image without a
// cluster. It is a stand-in above the seam between a plugin and the
// cluster; `make k8s-test` runs flannel against the real one.
type KubeAPI struct {
	URL string // http://host:port or https://host:port
	// CA is the PEM certificate of the TLS server (NewKubeAPI with tls).
	CA []byte

	srv      *httptest.Server
	mu       sync.Mutex
	node     map[string]any
	rv       int
	watchers map[chan []byte]bool
	patched  []string
}

// NewKubeAPI serves node (a Node object as JSON decodes it, named
// metadata.name) on l, over TLS when tls is set, until t ends.
func NewKubeAPI(t testing.TB, l net.Listener, tls bool, node map[string]any) *KubeAPI {
	t.Helper()
	k := &KubeAPI{node: node, rv: 1, watchers: map[chan []byte]bool{}}
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(k.serve))
	k.srv.Listener.Close()
	k.srv.Listener = l
	if tls {
		k.srv.StartTLS()
		k.CA = pemCert(k.srv.Certificate().Raw)
	} else {
		k.srv.Start()
	}
	k.URL = k.srv.URL
	t.Cleanup(func() {
		k.mu.Lock()
		for c := range k.watchers {
			close(c)
			delete(k.watchers, c)
		}
		k.mu.Unlock()
		k.srv.Close()
	})
	return k
}

// Node returns the node as it is now (patches applied).
func (k *KubeAPI) Node() map[string]any {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, _ := json.Marshal(k.node)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// Patched lists the paths patched so far, in order.
func (k *KubeAPI) Patched() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.patched...)
}

func (k *KubeAPI) name() string {
	md, _ := k.node["metadata"].(map[string]any)
	n, _ := md["name"].(string)
	return n
}

// objectLocked is the node with its resourceVersion; k.mu is held.
func (k *KubeAPI) objectLocked() map[string]any {
	obj := maps.Clone(k.node)
	md := maps.Clone(obj["metadata"].(map[string]any))
	md["resourceVersion"] = strconv.Itoa(k.rv)
	obj["metadata"] = md
	obj["kind"], obj["apiVersion"] = "Node", "v1"
	return obj
}

func (k *KubeAPI) serve(w http.ResponseWriter, r *http.Request) {
	nodePath := "/api/v1/nodes/" + k.name()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") != "":
		k.watch(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		k.mu.Lock()
		list := map[string]any{"kind": "NodeList", "apiVersion": "v1",
			"metadata": map[string]any{"resourceVersion": strconv.Itoa(k.rv)}, "items": []any{k.objectLocked()}}
		k.mu.Unlock()
		writeJSON(w, http.StatusOK, list)
	case r.Method == http.MethodGet && r.URL.Path == nodePath:
		k.mu.Lock()
		obj := k.objectLocked()
		k.mu.Unlock()
		writeJSON(w, http.StatusOK, obj)
	case r.Method == http.MethodPatch && (r.URL.Path == nodePath || r.URL.Path == nodePath+"/status"):
		k.patch(w, r)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
			"reason": "NotFound", "code": 404, "message": fmt.Sprintf("%s %s: not served by this test API", r.Method, r.URL.Path)})
	}
}

// patch merges a strategic-merge or merge patch into the node (objects
// merged key by key, anything else replaced: enough for annotations and
// conditions) and tells the watchers.
func (k *KubeAPI) patch(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var p map[string]any
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 400, "message": err.Error()})
		return
	}
	k.mu.Lock()
	mergeInto(k.node, p)
	k.rv++
	k.patched = append(k.patched, r.URL.Path)
	obj := k.objectLocked()
	ev, _ := json.Marshal(map[string]any{"type": "MODIFIED", "object": obj})
	for c := range k.watchers {
		select {
		case c <- ev:
		default:
		}
	}
	k.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

func mergeInto(dst, patch map[string]any) {
	for key, v := range patch {
		pm, ok := v.(map[string]any)
		dm, dok := dst[key].(map[string]any)
		if ok && dok {
			mergeInto(dm, pm)
			continue
		}
		if strings.HasPrefix(key, "$") {
			continue // strategic merge directives
		}
		dst[key] = v
	}
}

// watch streams the node's changes until the client goes or the server
// closes.
func (k *KubeAPI) watch(w http.ResponseWriter, r *http.Request) {
	c := make(chan []byte, 16)
	k.mu.Lock()
	k.watchers[c] = true
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		if k.watchers[c] {
			delete(k.watchers, c)
		}
		k.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-c:
			if !ok {
				return
			}
			_, _ = w.Write(append(ev, '\n'))
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
