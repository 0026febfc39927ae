package kurmacni

// Tests above the API seam: kurma-cni's verbs against the real API server
// and client over a fake backend (apitest). The real kurmad behind it is
// tested end to end in test/e2e (libcni, cnitool, podman, containerd).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// serve runs the API over a fake backend with networks mynet (default),
// other and broken (failed), and returns its socket.
func serve(t *testing.T) (string, *apitest.Backend) {
	t.Helper()
	b := apitest.New([]string{"mynet", "other", "third", "broken"}, 1)
	b.SetGeneration(api.Generation{Network: "broken", State: api.StateFailed, Reason: "main exited with status 1"})
	return apitest.Serve(t, b), b
}

func conf(version, sock string, networks any, extra map[string]any) []byte {
	c := map[string]any{"cniVersion": version, "name": "ktcni", "type": Type, "network": networks, "socket": sock}
	for k, v := range extra {
		c[k] = v
	}
	b, _ := json.Marshal(c)
	return b
}

func cmdArgs(stdin []byte, ctr, ifname string) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: ctr, Netns: "/run/netns/" + ctr, IfName: ifname, StdinData: stdin,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;IP=10.204.9.9"}
}

func newPlugin(out io.Writer) *Plugin {
	return &Plugin{Stdout: out, Caller: func() string { return "testrt" }}
}

// TestAddEveryVersion: ADD creates the runtime's pod with its identity,
// name, CNI_ARGS and capability arguments for every network, and prints
// one result in the version it was called with.
func TestAddEveryVersion(t *testing.T) {
	sock, b := serve(t)
	for i, v := range SupportedVersions() {
		t.Run(v, func(t *testing.T) {
			var out bytes.Buffer
			ctr := fmt.Sprintf("ctr%d", i)
			rc := map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}}
			err := newPlugin(&out).Add(cmdArgs(conf(v, sock, []string{"mynet", "other"}, map[string]any{"runtimeConfig": rc}), ctr, "net0"))
			if err != nil {
				t.Fatal(err)
			}
			res := parse(t, out.Bytes(), v)
			if len(res.Interfaces) != 2 || res.Interfaces[0].Name != "net0" || len(res.IPs) != 2 || *res.IPs[1].Interface != 1 {
				t.Errorf("result %s", out.Bytes())
			}
			if res.Interfaces[0].Sandbox != "/run/netns/"+ctr {
				t.Errorf("sandbox %q, want the runtime's netns path", res.Interfaces[0].Sandbox)
			}
			req := b.Created()[len(b.Created())-1]
			want := api.Runtime{Owner: "testrt", ContainerID: ctr, Interface: "net0", Network: "ktcni", Netns: "/run/netns/" + ctr}
			if req.Runtime == nil || *req.Runtime != want || req.Name != "default/web" {
				t.Errorf("pod request runtime %+v name %q", req.Runtime, req.Name)
			}
			args := "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;IP=10.204.9.9"
			if !slices.Equal(req.Networks, []string{"mynet:" + args, "other:" + args}) {
				t.Errorf("networks %q", req.Networks)
			}
			for _, n := range []string{"mynet", "other"} {
				if got := string(req.RuntimeConfig[n]["portMappings"]); got != `[{"containerPort":80,"hostPort":8080,"protocol":"tcp"}]` {
					t.Errorf("%s runtime config portMappings %s", n, got)
				}
			}
		})
	}
}

// parse reads a result printed in version v.
func parse(t *testing.T, out []byte, v string) *current.Result {
	t.Helper()
	var probe struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || probe.CNIVersion != v {
		t.Fatalf("result version %q (%v), want %s:\n%s", probe.CNIVersion, err, v, out)
	}
	r, err := create.Create(v, out)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := current.GetResult(r)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// TestAddChained: after a plugin that made an interface, kurma-cni's result
// holds the prevResult first and its own after it, IP indexes moved along.
func TestAddChained(t *testing.T) {
	sock, _ := serve(t)
	prev := map[string]any{"cniVersion": "1.0.0",
		"interfaces": []map[string]any{{"name": "cni0"}},
		"ips":        []map[string]any{{"address": "192.168.9.2/24", "interface": 0}},
		"dns":        map[string]any{"nameservers": []string{"192.168.9.1"}}}
	var out bytes.Buffer
	if err := newPlugin(&out).Add(cmdArgs(conf("1.0.0", sock, "mynet", map[string]any{"prevResult": prev}), "chained", "eth0")); err != nil {
		t.Fatal(err)
	}
	res := parse(t, out.Bytes(), "1.0.0")
	if len(res.Interfaces) != 2 || res.Interfaces[0].Name != "cni0" || res.Interfaces[1].Name != "eth0" ||
		len(res.IPs) != 2 || *res.IPs[0].Interface != 0 || *res.IPs[1].Interface != 1 ||
		!slices.Equal(res.DNS.Nameservers, []string{"192.168.9.1"}) {
		t.Errorf("chained result:\n%s", out.Bytes())
	}
}

// TestErrors: each failure is a CNI error with the code the issue names.
func TestErrors(t *testing.T) {
	sock, b := serve(t)
	gone := filepath.Join(filepath.Dir(sock), "gone.sock")
	b.Hook = func(method, arg string) error {
		if method == "CreatePod" && arg == "default/cnierr" {
			return &api.Error{Code: api.CodePluginFailed, Message: `network "mynet": /opt/network/add: exited with code 1`,
				CNI: &api.CNIError{Code: 4, Msg: "bad env", Details: "CNI_X"}}
		}
		return nil
	}
	tests := []struct {
		name, stdin, args string
		code              uint
		msg               string
	}{
		{"not JSON", `{"network":`, "", types.ErrDecodingFailure, "not valid JSON"},
		{"no network", string(conf("1.0.0", sock, nil, nil)), "", types.ErrInvalidNetworkConfig, `"network" is required`},
		{"network of the wrong type", string(conf("1.0.0", sock, 5, nil)), "", types.ErrInvalidNetworkConfig, `"network" must be`},
		{"network with arguments", string(conf("1.0.0", sock, "mynet:IP=1.2.3.4", nil)), "", types.ErrInvalidNetworkConfig, `"network"[0]`},
		{"network twice", string(conf("1.0.0", sock, []string{"mynet", "mynet"}, nil)), "", types.ErrInvalidNetworkConfig, `"mynet" is listed twice`},
		{"relative socket", string(conf("1.0.0", "kurmad.sock", "mynet", nil)), "", types.ErrInvalidNetworkConfig, `"socket"`},
		{"capabilities of the wrong type", string(conf("1.0.0", sock, "mynet", map[string]any{"capabilities": "all"})), "", types.ErrInvalidNetworkConfig, `"capabilities"`},
		{"unknown network", string(conf("1.0.0", sock, "nope", nil)), "", types.ErrInvalidNetworkConfig, `unknown network "nope"`},
		{"network not running", string(conf("1.0.0", sock, "broken", nil)), "", types.ErrTryAgainLater, `network "broken"`},
		{"kurmad down", string(conf("1.0.0", gone, "mynet", nil)), "", types.ErrTryAgainLater, "kurmad's API socket " + gone + " does not exist"},
		{"bad CNI_ARGS", string(conf("1.0.0", sock, "mynet", nil)), "novalue", types.ErrInvalidEnvironmentVariables, "CNI_ARGS"},
		{"a plugin's own CNI error", string(conf("1.0.0", sock, "mynet", nil)), "K8S_POD_NAMESPACE=default;K8S_POD_NAME=cnierr", 4, `network "mynet"`},
		// kurma-cni's own keys, misspelt, are refused rather than
		// ignored; a runtime's own keys are not.
		{"misspelt socket", string(conf("1.0.0", sock, "mynet", map[string]any{"sokcet": "/x.sock"})), "", types.ErrInvalidNetworkConfig, `unknown key "sokcet"; did you mean "socket"?`},
		{"misspelt network beside it", string(conf("1.0.0", sock, "mynet", map[string]any{"netwrok": "other"})), "", types.ErrInvalidNetworkConfig, `unknown key "netwrok"; did you mean "network"?`},
		{"network in another case", string(conf("1.0.0", sock, "mynet", map[string]any{"Owner": "me"})), "", types.ErrInvalidNetworkConfig, `did you mean "owner"?`},
		{"node agent with a dash", string(conf("1.0.0", sock, "mynet", map[string]any{"node-agent": "/x.sock"})), "", types.ErrInvalidNetworkConfig, `did you mean "node_agent"?`},
		// Said in JSON's words, never Go's.
		{"socket of the wrong type", string(conf("1.0.0", sock, "mynet", map[string]any{"socket": 5})), "", types.ErrInvalidNetworkConfig, `"socket": a JSON number where a string goes`},
		{"runtimeConfig of the wrong type", string(conf("1.0.0", sock, "mynet", map[string]any{"runtimeConfig": "x"})), "", types.ErrInvalidNetworkConfig, `"runtimeConfig": a JSON string where an object goes`},
		{"prevResult not a result", string(conf("1.0.0", sock, "mynet", map[string]any{"prevResult": "x"})), "", types.ErrDecodingFailure, `"prevResult" is not a CNI result object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := cmdArgs([]byte(tt.stdin), "errctr", "eth0")
			if tt.args != "" {
				a.Args = tt.args
			}
			err := newPlugin(io.Discard).Add(a)
			checkCNIError(t, err, tt.code, tt.msg)
			if e := (*types.Error)(nil); errors.As(err, &e) && regexp.MustCompile(`Go (struct|value)|json\.|map\[|interface \{\}`).MatchString(e.Msg+e.Details) {
				t.Errorf("the error speaks Go: %q (details %q)", e.Msg, e.Details)
			}
		})
	}
}

func checkCNIError(t *testing.T, err error, code uint, msg string) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) || e.Code != code || !strings.Contains(e.Msg, msg) {
		t.Errorf("error %#v, want CNI code %d with %q", err, code, msg)
	}
}

// TestDelIdempotent: DEL of an attachment, again, and of a container
// kurmad never saw all succeed; with kurmad down it is "try again later".
func TestDelIdempotent(t *testing.T) {
	sock, b := serve(t)
	p := newPlugin(io.Discard)
	c := conf("1.0.0", sock, "mynet", nil)
	if err := p.Add(cmdArgs(c, "delctr", "eth0")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ctr := "delctr"
		if i == 2 {
			ctr = "never"
		}
		if err := p.Del(cmdArgs(c, ctr, "eth0")); err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	if pods, _ := b.ListPods(context.Background()); len(pods) != 0 {
		t.Errorf("%d pods left after DEL", len(pods))
	}
	gone := filepath.Join(filepath.Dir(sock), "gone.sock")
	checkCNIError(t, p.Del(cmdArgs(conf("1.0.0", gone, "mynet", nil), "delctr", "eth0")), types.ErrTryAgainLater, gone)
}

// TestGC: the attachments of the runtime's network missing from
// cni.dev/valid-attachments are deleted; the valid one stays.
func TestGC(t *testing.T) {
	sock, b := serve(t)
	p := newPlugin(io.Discard)
	c := conf("1.1.0", sock, "mynet", nil)
	for _, ctr := range []string{"keep", "drop1", "drop2"} {
		if err := p.Add(cmdArgs(c, ctr, "eth0")); err != nil {
			t.Fatal(err)
		}
	}
	gc := conf("1.1.0", sock, "mynet", map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": "keep", "ifname": "eth0"}}})
	if err := p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
		t.Fatal(err)
	}
	pods, _ := b.ListPods(context.Background())
	if len(pods) != 1 || pods[0].Runtime.ContainerID != "keep" {
		t.Errorf("after GC: %+v", pods)
	}
}

// TestStatus: ready while every network runs; otherwise 50 naming the
// network, its state and reason, or the socket.
func TestStatus(t *testing.T) {
	sock, _ := serve(t)
	p := newPlugin(io.Discard)
	if err := p.Status(&skel.CmdArgs{StdinData: conf("1.1.0", sock, []string{"mynet", "other"}, nil)}); err != nil {
		t.Errorf("STATUS of running networks: %v", err)
	}
	checkCNIError(t, p.Status(&skel.CmdArgs{StdinData: conf("1.1.0", sock, []string{"mynet", "broken"}, nil)}),
		ErrNotAvailable, `network "broken" is not ready: failed: main exited with status 1`)
	checkCNIError(t, p.Status(&skel.CmdArgs{StdinData: conf("1.1.0", sock, "nope", nil)}), ErrNotAvailable, `kurmad has no network "nope"`)
	gone := filepath.Join(filepath.Dir(sock), "gone.sock")
	checkCNIError(t, p.Status(&skel.CmdArgs{StdinData: conf("1.1.0", gone, "mynet", nil)}), ErrNotAvailable, gone)
}

// TestNetworkStatus: a network is ready while one of its generations runs
// (the one serving adds); otherwise 50 with the newest generation's state,
// e.g. unavailable when its plugin's status says it cannot serve adds.
func TestNetworkStatus(t *testing.T) {
	nets := []api.Generation{
		{Network: "mynet", Generation: 1, State: api.StateRetiring},
		{Network: "mynet", Generation: 2, State: api.StateRunning},
		{Network: "other", Generation: 1, State: api.StateRetiring},
		{Network: "other", Generation: 2, State: api.StateUnavailable, Reason: "plugin status: no leases left"},
	}
	if e := networkStatus(nets, "mynet"); e != nil {
		t.Errorf("a running generation beside a retiring one: %v", e)
	}
	checkCNIError(t, networkStatus(nets, "other"), ErrNotAvailable, `network "other" is not ready: unavailable: plugin status: no leases left`)
}
