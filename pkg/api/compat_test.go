package api_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// The shapes the previous release's kurma-cni reads from kurmad's answers
// (its api.Pod, api.PodCheck and api.Network, as far as it reads them),
// before attachments were "attachments" naming their "network".
type (
	previousPod struct {
		ID       string `json:"id"`
		Netns    string `json:"netns"`
		Networks []struct {
			Name      string          `json:"name"`
			Interface string          `json:"interface"`
			Result    json.RawMessage `json:"result"`
		} `json:"networks"`
		Check *struct {
			Degraded bool `json:"degraded"`
			Networks []struct {
				Name, Interface, Outcome, Message string
			} `json:"networks"`
		} `json:"check"`
	}
	previousNetwork struct {
		Name       string `json:"name"`
		Generation int    `json:"generation"`
		State      string `json:"state"`
		Reason     string `json:"reason"`
	}
	previousDeleted struct {
		Deleted []string `json:"deleted"`
	}
)

// TestPreviousKurmaCNI: during a rolling update the previous release's
// kurma-cni (on the host) talks to the new kurmad. Every request it sends,
// in its shape (the interface as "ifname"), is understood, and every
// answer carries what it reads (a pod's "networks" with "name" and
// "result", a check's "networks", a generation's "name").
func TestPreviousKurmaCNI(t *testing.T) {
	b := newBackend()
	sock := apitest.Serve(t, b)
	decode := func(status, want int, body string, v any) {
		t.Helper()
		if status != want {
			t.Fatalf("status %d, want %d: %s", status, want, body)
		}
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
	}

	// ADD: POST /v1/pods as the previous kurma-cni's createRequest built it.
	status, body := raw(t, sock, "POST", "/v1/pods", `{"name":"default/web","networks":["mynet:K8S_POD_NAME=web"],`+
		`"runtime":{"owner":"podman","container_id":"c0ffee","ifname":"net1","network":"kcni","netns":"/run/netns/c0ffee"}}`, nil)
	var pod previousPod
	decode(status, 201, body, &pod)
	if got := b.Created(); len(got) != 1 || got[0].Runtime == nil || got[0].Runtime.Interface != "net1" {
		t.Fatalf("the backend got %+v, want the runtime's interface net1 from \"ifname\"", got)
	}
	if len(pod.Networks) != 1 || pod.Networks[0].Name != "mynet" || pod.Networks[0].Interface != "net1" || len(pod.Networks[0].Result) == 0 {
		t.Fatalf("the answer's \"networks\" (what kurma-cni merges into its result) = %+v\n%s", pod.Networks, body)
	}

	// CHECK: find the pod by the runtime's identity with "ifname", check it.
	q := url.Values{"container_id": {"c0ffee"}, "ifname": {"net1"}, "network": {"kcni"}}
	var found []previousPod
	status, body = raw(t, sock, "GET", "/v1/pods?"+q.Encode(), "", nil)
	decode(status, 200, body, &found)
	if len(found) != 1 || found[0].ID != pod.ID {
		t.Fatalf("GET /v1/pods?%s = %s, want pod %s", q.Encode(), body, pod.ID)
	}
	q.Set("ifname", "net2")
	status, body = raw(t, sock, "GET", "/v1/pods?"+q.Encode(), "", nil)
	decode(status, 200, body, &found)
	if len(found) != 0 {
		t.Fatalf("GET /v1/pods?%s found %s: \"ifname\" was not taken as the interface", q.Encode(), body)
	}
	b.BreakCheck(pod.ID, "mynet", "bridge gone")
	var checked previousPod
	status, body = raw(t, sock, "GET", "/v1/pods/"+pod.ID+"/check", "", nil)
	decode(status, 200, body, &checked)
	if c := checked.Check; c == nil || !c.Degraded || len(c.Networks) != 1 || c.Networks[0].Name != "mynet" ||
		c.Networks[0].Outcome != api.CheckFailed || c.Networks[0].Message != "bridge gone" {
		t.Fatalf("the check's \"networks\" = %+v\n%s", c, body)
	}

	// STATUS: every generation names its network as "name" too.
	var gens []previousNetwork
	status, body = raw(t, sock, "GET", "/v1/networks", "", nil)
	decode(status, 200, body, &gens)
	if len(gens) != 3 || gens[0].Name != "mynet" || gens[0].State != api.StateRunning {
		t.Fatalf("GET /v1/networks in the previous shape = %+v\n%s", gens, body)
	}

	// GC: the valid attachments with "ifname" keep the pod; then DEL with
	// "ifname" removes it.
	var deleted previousDeleted
	status, body = raw(t, sock, "POST", "/v1/pods/gc", `{"network":"kcni","owner":"podman","valid_attachments":[{"container_id":"c0ffee","ifname":"net1"}]}`, nil)
	decode(status, 200, body, &deleted)
	if len(deleted.Deleted) != 0 {
		t.Fatalf("GC released %v: its valid attachment's \"ifname\" was not read", deleted.Deleted)
	}
	q.Set("ifname", "net1")
	status, body = raw(t, sock, "DELETE", "/v1/pods?"+q.Encode(), "", nil)
	decode(status, 200, body, &deleted)
	if !slices.Equal(deleted.Deleted, []string{pod.ID}) {
		t.Fatalf("DELETE /v1/pods?%s = %s, want pod %s", q.Encode(), body, pod.ID)
	}
}

// TestDeprecatedNameDisagrees: a request naming the interface under both
// its names, differently, is refused with both names; the same value
// twice is taken.
func TestDeprecatedNameDisagrees(t *testing.T) {
	sock := apitest.Serve(t, newBackend())
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/v1/pods", `{"runtime":{"container_id":"c1","interface":"eth0","ifname":"eth1","netns":"/run/netns/c1"}}`},
		{"POST", "/v1/pods/gc", `{"network":"kcni","valid_attachments":[{"container_id":"c1","interface":"eth0","ifname":"eth1"}]}`},
		{"GET", "/v1/pods?container_id=c1&interface=eth0&ifname=eth1", ""},
		{"DELETE", "/v1/pods?container_id=c1&interface=eth0&ifname=eth1", ""},
	} {
		status, body := raw(t, sock, tt.method, tt.path, tt.body, nil)
		var e struct{ Error, Code string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || status != 400 || e.Code != api.CodeBadRequest ||
			!strings.Contains(e.Error, `"interface"`) || !strings.Contains(e.Error, `"ifname"`) {
			t.Errorf("%s %s %s: %d %s, want 400 bad_request naming \"interface\" and \"ifname\"", tt.method, tt.path, tt.body, status, body)
		}
	}
	status, body := raw(t, sock, "POST", "/v1/pods", `{"runtime":{"container_id":"c2","interface":"eth0","ifname":"eth0","netns":"/run/netns/c2"}}`, nil)
	var pod api.Pod
	if err := json.Unmarshal([]byte(body), &pod); err != nil || status != 201 || pod.Runtime == nil || pod.Runtime.Interface != "eth0" {
		t.Errorf("both names, one value: %d %s", status, body)
	}
}

// TestCreateAnswerMinimal: a create that prefers return=minimal (this
// release's kurma-cni and kurmactl) is answered with each attachment's
// result once, without its raw result or the deprecated "networks"; a
// create that does not (any earlier /v1 client) gets every field it got
// before.
func TestCreateAnswerMinimal(t *testing.T) {
	b := newBackend()
	sock := apitest.Serve(t, b)
	const req = `{"networks":["mynet"]}`
	keys := func(body string) (pod []string, att []string) {
		t.Helper()
		var p map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		var atts []map[string]json.RawMessage
		if err := json.Unmarshal(p["attachments"], &atts); err != nil || len(atts) != 1 {
			t.Fatalf("attachments of %s: %v", body, err)
		}
		for k := range p {
			pod = append(pod, k)
		}
		for k := range atts[0] {
			att = append(att, k)
		}
		slices.Sort(pod)
		slices.Sort(att)
		return pod, att
	}

	status, body := raw(t, sock, "POST", "/v1/pods", req, map[string]string{"Prefer": "respond-async, " + api.PreferMinimal})
	if status != 201 {
		t.Fatalf("status %d: %s", status, body)
	}
	pod, att := keys(body)
	if slices.Contains(pod, "networks") || !slices.Equal(att, []string{"image", "interface", "network", "result"}) {
		t.Errorf("minimal answer: pod keys %q, attachment keys %q; want no \"networks\" and the result alone\n%s", pod, att, body)
	}
	if n := strings.Count(body, `"cniVersion"`); n != 1 {
		t.Errorf("minimal answer carries the result %d times, want once:\n%s", n, body)
	}

	status, body = raw(t, sock, "POST", "/v1/pods", req, nil)
	if status != 201 {
		t.Fatalf("status %d: %s", status, body)
	}
	pod, att = keys(body)
	if !slices.Contains(pod, "networks") || !slices.Equal(att, []string{"image", "interface", "network", "raw_result", "result"}) {
		t.Errorf("answer to a client without Prefer: pod keys %q, attachment keys %q; want them as before\n%s", pod, att, body)
	}

	c := api.NewClient(sock)
	short, err := c.CreatePod(t.Context(), api.CreatePodRequest{Networks: []string{"mynet"}})
	if err != nil {
		t.Fatal(err)
	}
	full, err := c.CreatePodFull(t.Context(), api.CreatePodRequest{Networks: []string{"mynet"}})
	if err != nil {
		t.Fatal(err)
	}
	if a := short.Attachments; len(a) != 1 || len(a[0].Result) == 0 || a[0].RawResult != "" {
		t.Errorf("CreatePod: attachments %+v, want the result without the raw result", a)
	}
	if a := full.Attachments; len(a) != 1 || len(a[0].Result) == 0 || a[0].RawResult == "" {
		t.Errorf("CreatePodFull: attachments %+v, want the result and the raw result", a)
	}
	got, err := c.GetPod(t.Context(), short.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Attachments; len(a) != 1 || a[0].RawResult == "" {
		t.Errorf("GET of the pod created with the short answer: attachments %+v, want the raw result", a)
	}
}
