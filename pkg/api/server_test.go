package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// childEnv makes the test binary act as a client (see TestMain): it is
// re-executed as an unprivileged user to test the root-only socket.
const childEnv = "KURMA_API_TEST_CHILD_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(childEnv); sock != "" {
		_, err := api.NewClient(sock).Info(context.Background())
		var e *api.Error
		switch {
		case err == nil:
			fmt.Println("OK")
		case errors.As(err, &e):
			fmt.Printf("APIERROR %d %s %s\n", e.Status, e.Code, e.Message)
		default:
			fmt.Printf("ERROR %v\n", err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// shortDir is a fresh temp dir with a short path (testutil.ShortDir).
func shortDir(t testing.TB) string { return testutil.ShortDir(t, "kapi") }

func newBackend() *apitest.Backend {
	return apitest.New([]string{"mynet", "other", "spare"}, 1)
}

func TestRoutesThroughClient(t *testing.T) {
	b := newBackend()
	c := api.NewClient(apitest.Serve(t, b))
	ctx := context.Background()

	info, err := c.Info(ctx)
	if err != nil || info.Version != "test" || info.Networks != 3 {
		t.Fatalf("Info = %+v, %v", info, err)
	}

	pod, err := c.CreatePod(ctx, api.CreatePodRequest{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "web" || len(pod.Attachments) != 1 || pod.Attachments[0].Network != "mynet" || pod.Attachments[0].Interface != "eth0" {
		t.Fatalf("default pod = %+v", pod)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(pod.Attachments[0].Result, &res); err != nil || res.CNIVersion != "1.1.0" {
		t.Fatalf("result %s: %v", pod.Attachments[0].Result, err)
	}
	pod2, err := c.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"other:IP=10.1.0.9;K=V", "mynet"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod2.Attachments) != 2 || pod2.Attachments[0].Network != "other" || pod2.Attachments[1].Interface != "eth1" {
		t.Fatalf("explicit pod = %+v", pod2)
	}
	if got := b.Created()[1].Networks; len(got) != 2 || got[0] != "other:IP=10.1.0.9;K=V" {
		t.Fatalf("backend saw networks %q", got)
	}

	_, err = c.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"nope"}})
	wantAPIError(t, err, 400, api.CodeUnknownNetwork, `unknown network "nope"`)

	pods, err := c.ListPods(ctx)
	if err != nil || len(pods) != 2 {
		t.Fatalf("ListPods = %d pods, %v", len(pods), err)
	}
	got, err := c.GetPod(ctx, pod.ID)
	if err != nil || got.ID != pod.ID || !got.Created.Equal(pod.Created) {
		t.Fatalf("GetPod = %+v, %v", got, err)
	}

	nets, err := c.Networks(ctx)
	if err != nil || len(nets) != 3 || nets[0].State != api.StateRunning || !nets[0].Default {
		t.Fatalf("Networks = %+v, %v", nets, err)
	}
	imgs, err := c.Images(ctx)
	if err != nil || len(imgs) != 3 {
		t.Fatalf("Images = %+v, %v", imgs, err)
	}

	img, err := c.PullImage(ctx, "docker://example.com/plugin:1", nil)
	if err != nil || img.Source != "docker://example.com/plugin:1" {
		t.Fatalf("PullImage = %+v, %v", img, err)
	}
	err = c.RemoveImage(ctx, imgs[0].ID)
	wantAPIError(t, err, 409, api.CodeConflict, "used by network mynet")
	if err := c.RemoveImage(ctx, img.ID); err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, c.RemoveImage(ctx, img.ID), 404, api.CodeNotFound, "not found")

	if err := c.DeletePod(ctx, pod.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetPod(ctx, pod.ID)
	wantAPIError(t, err, 404, api.CodeNotFound, pod.ID)
	wantAPIError(t, c.DeletePod(ctx, pod.ID), 404, api.CodeNotFound, pod.ID)
}

// The check and calls routes: a pod's check comes back in the pod, and
// its calls as a list; an unknown pod is 404, another method 405.
func TestCheckAndCallsRoutes(t *testing.T) {
	b := newBackend()
	sock := apitest.Serve(t, b)
	c := api.NewClient(sock)
	ctx := context.Background()
	pod, err := c.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"mynet", "other"}})
	if err != nil {
		t.Fatal(err)
	}
	b.BreakCheck(pod.ID, "other", "eth1 is gone")
	got, err := c.CheckPod(ctx, pod.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Check == nil || !got.Check.Degraded || len(got.Check.Attachments) != 2 || got.Check.Attachments[1].Outcome != api.CheckFailed ||
		got.Check.Attachments[1].Message != "eth1 is gone" || got.Check.Attachments[0].Outcome != api.CheckPassed {
		t.Errorf("CheckPod = %+v", got.Check)
	}
	calls, err := c.PodCalls(ctx, pod.ID)
	if err != nil || len(calls) != 2 || calls[0].Path != "/opt/network/add" || calls[1].Network != "other" || calls[0].DurationMS != 12.5 {
		t.Errorf("PodCalls = %+v, %v", calls, err)
	}
	_, err = c.CheckPod(ctx, "nosuch")
	wantAPIError(t, err, 404, api.CodeNotFound, "nosuch")
	_, err = c.PodCalls(ctx, "nosuch")
	wantAPIError(t, err, 404, api.CodeNotFound, "nosuch")
	if status, body := raw(t, sock, "POST", "/v1/pods/"+pod.ID+"/check", "", nil); status != 405 || !strings.Contains(body, "method_not_allowed") {
		t.Errorf("POST check: %d %s", status, body)
	}
}

func TestEmptyListsAreArrays(t *testing.T) {
	sock := apitest.Serve(t, apitest.New(nil, 0))
	for _, path := range []string{"/v1/pods", "/v1/networks", "/v1/images"} {
		status, body := raw(t, sock, "GET", path, "", nil)
		if status != 200 || strings.TrimSpace(body) != "[]" {
			t.Errorf("GET %s = %d %q, want 200 []", path, status, body)
		}
	}
}

func TestPullProgressNDJSON(t *testing.T) {
	b := newBackend()
	b.PullSteps = 4
	sock := apitest.Serve(t, b)
	c := api.NewClient(sock)

	var mu sync.Mutex
	var seen [][2]int64
	img, err := c.PullImage(context.Background(), "docker://example.com/p:1", func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, [2]int64{done, total})
	})
	if err != nil || img == nil || img.Source != "docker://example.com/p:1" {
		t.Fatalf("PullImage = %+v, %v", img, err)
	}
	if len(seen) != 4 || seen[3] != [2]int64{1 << 20, 1 << 20} {
		t.Fatalf("progress = %v, want 4 steps ending at 1MiB/1MiB", seen)
	}

	// The wire format, line by line.
	status, body := raw(t, sock, "POST", "/v1/images", `{"uri":"docker://x/y"}`, map[string]string{"Accept": api.NDJSONType})
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if status != 200 || len(lines) != 5 {
		t.Fatalf("stream = %d %q", status, body)
	}
	if lines[0] != `{"progress":{"done":262144,"total":1048576}}` {
		t.Errorf("first line %s", lines[0])
	}
	if !strings.HasPrefix(lines[4], `{"image":{"id":"sha256-`) {
		t.Errorf("last line %s", lines[4])
	}

	// An error after the stream started arrives as the last line.
	b.Hook = func(method, _ string) error {
		if method == "PullImage" {
			return api.Errorf(api.CodeNotFound, "image docker://x/missing not found in registry")
		}
		return nil
	}
	_, err = c.PullImage(context.Background(), "docker://x/missing", func(int64, int64) {})
	wantAPIError(t, err, 404, api.CodeNotFound, "not found in registry")
	_, body = raw(t, sock, "POST", "/v1/images", `{"uri":"docker://x/missing"}`, map[string]string{"Accept": api.NDJSONType})
	if strings.TrimSpace(body) != `{"error":"image docker://x/missing not found in registry","code":"not_found"}` {
		t.Errorf("error line %q", body)
	}
}

func TestErrorPropagation(t *testing.T) {
	b := newBackend()
	c := api.NewClient(apitest.Serve(t, b))
	ctx := context.Background()
	tests := []struct {
		err        error
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{api.Errorf(api.CodeNetworkUnavailable, `network "mynet" is unavailable: main exited`), 503, "network_unavailable", "is unavailable"},
		{api.Errorf(api.CodePluginTimeout, `network "mynet": /opt/network/add timed out after 1m0s`), 504, "plugin_timeout", "timed out"},
		{api.Errorf(api.CodePluginFailed, `network "mynet": add: exit 1`), 502, "plugin_failed", "exit 1"},
		{api.Errorf(api.CodeConflict, "busy"), 409, "conflict", "busy"},
		{api.Errorf(api.CodeNotFound, "gone"), 404, "not_found", "gone"},
		{&api.Error{Status: 418, Code: "teapot", Message: "custom"}, 418, "teapot", "custom"},
		{fmt.Errorf("wrapped: %w", api.Errorf(api.CodeConflict, "inner")), 409, "conflict", "inner"},
		{errors.New("disk on fire"), 500, "internal", "disk on fire"},
	}
	for _, tt := range tests {
		t.Run(tt.wantCode, func(t *testing.T) {
			b.Hook = func(string, string) error { return tt.err }
			_, err := c.CreatePod(ctx, api.CreatePodRequest{})
			wantAPIError(t, err, tt.wantStatus, tt.wantCode, tt.wantMsg)
			_, err = c.PullImage(ctx, "docker://a/b", func(int64, int64) {})
			wantAPIError(t, err, api.StatusFor(tt.wantCode), tt.wantCode, tt.wantMsg)
		})
	}
}

func TestBackendPanicIsRecovered(t *testing.T) {
	b := newBackend()
	b.Hook = func(method, _ string) error {
		if method == "ListPods" {
			panic("boom")
		}
		return nil
	}
	sock := apitest.Serve(t, b)
	c := api.NewClient(sock)
	for range 3 {
		_, err := c.ListPods(context.Background())
		wantAPIError(t, err, 500, api.CodeInternal, "boom")
	}
	b.Hook = func(method, _ string) error {
		if method == "PullImage" {
			panic("pull boom")
		}
		return nil
	}
	_, err := c.PullImage(context.Background(), "docker://a/b", func(int64, int64) {})
	wantAPIError(t, err, 500, api.CodeInternal, "pull boom")
	_, err = c.PullImage(context.Background(), "docker://a/b", nil)
	wantAPIError(t, err, 500, api.CodeInternal, "pull boom")
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatalf("server stopped serving after a panic: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	sock := apitest.Serve(t, newBackend())
	big := `{"name":"` + strings.Repeat("a", 2<<20) + `"}`
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantCode, wantMsg        string
	}{
		{"empty", "POST", "/v1/pods", "", 400, "bad_request", "empty"},
		{"malformed", "POST", "/v1/pods", `{"networks": [mynet]}`, 400, "bad_request", "malformed JSON"},
		{"truncated", "POST", "/v1/pods", `{"networks": ["mynet"`, 400, "bad_request", "truncated"},
		{"not an object", "POST", "/v1/pods", `["mynet"]`, 400, "bad_request", "must be a JSON object"},
		{"null", "POST", "/v1/pods", `null`, 400, "bad_request", "must be a JSON object"},
		{"wrong type list", "POST", "/v1/pods", `{"networks": "mynet"}`, 400, "bad_request", `field "networks": expected a list of strings, got JSON string`},
		{"wrong type elem", "POST", "/v1/pods", `{"networks": [1]}`, 400, "bad_request", `field "networks`},
		{"wrong type name", "POST", "/v1/pods", `{"name": 5}`, 400, "bad_request", `field "name": expected a string, got JSON number`},
		{"unknown field", "POST", "/v1/pods", `{"netwroks": ["mynet"]}`, 400, "bad_request", `unknown field "netwroks" (known fields: name, networks, runtime_config, interfaces, runtime)`},
		{"unknown nested field", "POST", "/v1/pods", `{"runtime": {"container_id": "abc", "interface": "eth0", "netns": "/run/netns/x", "netnz": 1}}`, 400, "bad_request", `unknown field "runtime.netnz" (known fields: owner, container_id, interface, network, netns, dropped, dropped_at)`},
		{"runtime container id", "POST", "/v1/pods", `{"runtime": {"container_id": "a b", "interface": "eth0", "netns": "/run/netns/x"}}`, 400, "bad_request", `field "runtime.container_id"`},
		{"runtime interface", "POST", "/v1/pods", `{"runtime": {"container_id": "abc", "interface": "a/b", "netns": "/run/netns/x"}}`, 400, "bad_request", `field "runtime.interface"`},
		{"runtime deprecated ifname", "POST", "/v1/pods", `{"runtime": {"container_id": "abc", "ifname": "a/b", "netns": "/run/netns/x"}}`, 400, "bad_request", `field "runtime.interface"`},
		{"runtime netns", "POST", "/v1/pods", `{"runtime": {"container_id": "abc", "interface": "eth0", "netns": "x"}}`, 400, "bad_request", `field "runtime.netns"`},
		{"runtime network", "POST", "/v1/pods", `{"runtime": {"container_id": "abc", "interface": "eth0", "network": "a/b", "netns": "/x"}}`, 400, "bad_request", `field "runtime.network"`},
		{"runtime_config null", "POST", "/v1/pods", `{"runtime_config": {"mynet": {"mac": null}}}`, 400, "bad_request", `runtime_config[\"mynet\"][\"mac\"]`},
		{"runtime_config not an object", "POST", "/v1/pods", `{"runtime_config": {"mynet": []}}`, 400, "bad_request", `field "runtime_config`},
		{"runtime delete without container", "DELETE", "/v1/pods", "", 400, "bad_request", "needs container_id"},
		{"runtime delete unknown parameter", "DELETE", "/v1/pods?container=x", "", 400, "bad_request", `unknown query parameter "container"`},
		{"runtime list bad interface", "GET", "/v1/pods?container_id=abc&interface=a%2Fb", "", 400, "bad_request", `field "interface"`},
		{"runtime list bad deprecated ifname", "GET", "/v1/pods?container_id=abc&ifname=a%2Fb", "", 400, "bad_request", `field "interface"`},
		{"gc without network", "POST", "/v1/pods/gc", `{"valid_attachments": []}`, 400, "bad_request", `"network" is required`},
		{"runtime dropped", "POST", "/v1/pods", `{"runtime": {"container_id": "c", "interface": "eth0", "netns": "/run/netns/c", "dropped": "x"}}`, 400, "bad_request", `"runtime.dropped"`},
		{"gc without valid attachments", "POST", "/v1/pods/gc", `{"network": "n"}`, 400, "bad_request", `"valid_attachments" is required`},
		{"gc with null valid attachments", "POST", "/v1/pods/gc", `{"network": "n", "valid_attachments": null}`, 400, "bad_request", `"valid_attachments" is required`},
		{"gc bad attachment", "POST", "/v1/pods/gc", `{"network": "n", "valid_attachments": [{"container_id": "", "interface": "eth0"}]}`, 400, "bad_request", `"valid_attachments[0].container_id" is required`},
		{"trailing garbage", "POST", "/v1/pods", `{"networks": []}xyz`, 400, "bad_request", "unexpected data after the JSON object"},
		{"two objects", "POST", "/v1/pods", `{} {}`, 400, "bad_request", "unexpected data after"},
		{"empty network", "POST", "/v1/pods", `{"networks": [""]}`, 400, "bad_request", `"networks[0]": empty network reference`},
		{"control char", "POST", "/v1/pods", `{"name": "a\u0007b"}`, 400, "bad_request", `"name": control character`},
		{"oversized", "POST", "/v1/pods", big, 400, "bad_request", "request body too large"},
		{"oversized pull", "POST", "/v1/images", big, 400, "bad_request", "request body too large"},
		{"pull without uri", "POST", "/v1/images", `{}`, 400, "bad_request", `"uri" is required`},
		{"pull wrong type", "POST", "/v1/images", `{"uri": ["x"]}`, 400, "bad_request", `field "uri": expected a string`},
		{"wrong method", "PUT", "/v1/pods", `{}`, 405, "method_not_allowed", "allowed: DELETE, GET, HEAD, POST"},
		{"wrong method item", "POST", "/v1/pods/abc", `{}`, 405, "method_not_allowed", "not allowed"},
		{"unknown path", "GET", "/v2/pods", "", 404, "not_found", "no route GET /v2/pods"},
		{"root", "GET", "/", "", 404, "not_found", "no route"},
		{"trailing slash", "GET", "/v1/pods/", "", 404, "not_found", "no route"},
		{"unclean path", "GET", "/v1/pods/../../v1/info", "", 404, "not_found", "did you mean /v1/info?"},
		{"probe of an unknown network", "GET", "/v1/networks?probe=nosuch", "", 400, "unknown_network", `unknown network "nosuch" (known networks: mynet`},
		{"empty interface", "POST", "/v1/pods", `{"networks": ["mynet"], "interfaces": {"mynet": ""}}`, 400, "bad_request", `field "interfaces[\"mynet\"]": empty interface name`},
		{"bad interface", "POST", "/v1/pods", `{"networks": ["mynet"], "interfaces": {"mynet": "a/b"}}`, 400, "bad_request", `field "interfaces[\"mynet\"]": "a/b"`},
		{"long interface", "POST", "/v1/pods", `{"networks": ["mynet"], "interfaces": {"mynet": "abcdefghijklmnop"}}`, 400, "bad_request", `field "interfaces[\"mynet\"]"`},
		{"broadcast mac", "POST", "/v1/pods", `{"runtime_config": {"mynet": {"mac": "ff:ff:ff:ff:ff:ff"}}}`, 400, "bad_request", "multicast or broadcast"},
		{"zero mac", "POST", "/v1/pods", `{"runtime_config": {"mynet": {"mac": "00:00:00:00:00:00"}}}`, 400, "bad_request", "all zeros"},
		{"mac not a string", "POST", "/v1/pods", `{"runtime_config": {"mynet": {"mac": 5}}}`, 400, "bad_request", `[\"mac\"]": expected a string`},
		{"bad ips", "POST", "/v1/pods", `{"runtime_config": {"mynet": {"ips": ["10.1.2"]}}}`, 400, "bad_request", `"10.1.2" is not an IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := raw(t, sock, tt.method, tt.path, tt.body, nil)
			var e struct{ Error, Code string }
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%d body %q is not a JSON error: %v", status, body, err)
			}
			t.Logf("%d %s: %s", status, e.Code, e.Error)
			if status != tt.wantStatus || e.Code != tt.wantCode || !strings.Contains(e.Error, tt.wantMsg) {
				t.Errorf("got %d %q %q, want %d %q containing %q", status, e.Code, e.Error, tt.wantStatus, tt.wantCode, tt.wantMsg)
			}
		})
	}
	if _, err := api.NewClient(sock).Info(context.Background()); err != nil {
		t.Fatalf("server stopped serving: %v", err)
	}
}

func TestSocketFile(t *testing.T) {
	testutil.RequireRoot(t) // the socket and its directory are root's
	dir := filepath.Join(shortDir(t), "new", "run")
	sock := filepath.Join(dir, "kurmad.sock")
	l, err := api.Listen(sock, api.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want socket 0600", fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
		t.Errorf("socket owned by uid %d", st.Uid)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("socket dir %v, %v; want 0700", di.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("socket dir holds %d entries, want only the socket", len(entries))
	}

	// A live socket is not stale.
	if _, err := api.Listen(sock, api.ListenOptions{}); !errors.Is(err, api.ErrSocketServed) || !strings.Contains(err.Error(), "is kurmad already running?") {
		t.Errorf("second Listen on a served socket: %v, want ErrSocketServed asking whether kurmad runs", err)
	}
	l.Close()
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Close left the socket: %v", err)
	}

	// A stale socket (its listener died without unlinking) is replaced.
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	l2, err := api.Listen(sock, api.ListenOptions{})
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l2.Close()

	// Anything else is left alone.
	if err := os.WriteFile(sock, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Listen(sock, api.ListenOptions{}); !errors.Is(err, api.ErrNotSocket) || !strings.Contains(err.Error(), "api socket "+sock+": exists and is not a socket") {
		t.Errorf("Listen over a regular file: %v, want ErrNotSocket naming the path", err)
	}
	if b, err := os.ReadFile(sock); err != nil || string(b) != "keep" {
		t.Errorf("the regular file after Listen: %q, %v; want it kept", b, err)
	}
}

func TestClientUnreachable(t *testing.T) {
	sock := filepath.Join(shortDir(t), "missing.sock")
	_, err := api.NewClient(sock).Info(context.Background())
	if !errors.Is(err, api.ErrUnreachable) || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), "cannot reach kurmad at "+sock) || !strings.Contains(err.Error(), "is kurmad running?") {
		t.Fatalf("err = %v, want ErrUnreachable (no such socket) naming the socket", err)
	}
}

// TestNonRootPeer runs a client as nobody (uid 65534): on the 0600 socket it
// cannot even connect; on a socket opened to everyone it gets 403 from the
// peer credential check.
func TestNonRootPeer(t *testing.T) {
	testutil.RequireRoot(t)
	sock := apitest.Serve(t, newBackend())
	dir := filepath.Dir(sock)
	base := filepath.Dir(dir)
	for _, d := range []string{base, dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "client.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	runAsNobody := func() string {
		t.Helper()
		cmd := exec.Command(bin)
		cmd.Env = []string{childEnv + "=" + sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}

	if out := runAsNobody(); !strings.Contains(out, "permission denied") || !strings.Contains(out, "cannot reach kurmad") {
		t.Errorf("nobody on the 0600 socket: %s", out)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if out := runAsNobody(); !strings.HasPrefix(out, "APIERROR 403 forbidden") {
		t.Errorf("nobody on an open socket: %s", out)
	}
	if _, err := api.NewClient(sock).Info(context.Background()); err != nil {
		t.Errorf("root after a refused peer: %v", err)
	}
}

func wantAPIError(t *testing.T, err error, status int, code, msg string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want *api.Error %d %s", err, err, status, code)
	}
	if e.Status != status || e.Code != code || !strings.Contains(e.Message, msg) {
		t.Fatalf("err = %d %q %q, want %d %q containing %q", e.Status, e.Code, e.Message, status, code, msg)
	}
}

// raw sends one request to sock and returns the status and body.
func raw(t *testing.T, sock, method, path, body string, headers map[string]string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, err := http.NewRequest(method, "http://kurmad"+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestRequestLog(t *testing.T) {
	var buf testutil.SyncBuffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetLevel(logrus.DebugLevel)
	log.SetFormatter(&logrus.JSONFormatter{})
	srv := api.NewServer(newBackend(), api.ServerOptions{Logger: log})
	sock := filepath.Join(shortDir(t), "k.sock")
	l, err := api.Listen(sock, api.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l, time.Second) }()
	defer func() { cancel(); <-done; l.Close() }()

	raw(t, sock, "GET", "/v1/pods/nope", "", nil)
	// The server logs a request once its response is written.
	var entry map[string]any
	testutil.WaitFor(t, 2*time.Second, "the request's log entry", func() error {
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if strings.Contains(line, `"api request"`) {
				return json.Unmarshal([]byte(line), &entry)
			}
		}
		return fmt.Errorf("not logged: %q", buf.String())
	})
	if entry["method"] != "GET" || entry["path"] != "/v1/pods/nope" || entry["status"] != float64(404) || entry["duration"] == nil || entry["level"] != "debug" {
		t.Errorf("request log entry %v in\n%s", entry, buf.String())
	}
}

func TestPullCanceledByClient(t *testing.T) {
	b := newBackend()
	b.PullSteps = 50 // 6 s if not canceled
	c := api.NewClient(apitest.Serve(t, b))
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	_, err := c.PullImage(ctx, "docker://a/slow", func(done, total int64) { cancel() })
	if !errors.Is(err, context.Canceled) || time.Since(start) > 3*time.Second {
		t.Fatalf("err = %v after %v, want context.Canceled quickly", err, time.Since(start))
	}
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestServeShutdownWaitsForRequests(t *testing.T) {
	b := newBackend()
	started, release := make(chan struct{}), make(chan struct{})
	b.Hook = func(method, _ string) error {
		if method == "CreatePod" {
			close(started)
			<-release
		}
		return nil
	}
	sock := filepath.Join(shortDir(t), "k.sock")
	l, err := api.Listen(sock, api.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.NewServer(b, api.ServerOptions{Logger: log}).Serve(ctx, l, 5*time.Second) }()

	created := make(chan error, 1)
	go func() {
		_, err := api.NewClient(sock).CreatePod(context.Background(), api.CreatePodRequest{})
		created <- err
	}()
	<-started
	cancel()
	// The request is still in its handler when the server stops taking
	// connections: shutdown has begun, and must wait for it.
	testutil.WaitFor(t, 5*time.Second, "the server to stop accepting", func() error {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return errors.New("a new connection was accepted")
		}
		return nil
	})
	close(release)
	if err := <-created; err != nil {
		t.Errorf("request in flight at shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	l.Close()
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
}
