package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// serve runs an api.Server over a fake backend on a temp socket: kurmactl
// is tested against the real server and client, above the Backend seam.
func serve(t *testing.T) (string, *apitest.Backend) {
	t.Helper()
	b := apitest.New([]string{"mynet", "other", "broken"}, 1)
	b.SetGeneration(api.Generation{Network: "broken", State: api.StateFailed, Image: "sha512-00ff", Restarts: 3,
		Reason: "main exited with status 1"})
	return apitest.Serve(t, b), b
}

func kurmactl(t *testing.T, sock string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	if sock != "" {
		args = append([]string{"--socket", sock}, args...)
	}
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func mustRun(t *testing.T, sock string, args ...string) string {
	t.Helper()
	out, errOut, code := kurmactl(t, sock, args...)
	if code != 0 {
		t.Fatalf("kurmactl %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// header returns the first line's column names.
func header(out string) []string {
	first, _, _ := strings.Cut(out, "\n")
	return strings.Split(regexpSpaces(first), "|")
}

func regexpSpaces(s string) string {
	// Columns are separated by two or more spaces (USED BY has one).
	var parts []string
	for _, p := range strings.Split(s, "  ") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "|")
}

func TestTables(t *testing.T) {
	sock, _ := serve(t)

	out := mustRun(t, sock, "pod", "create", "--name", "web", "--net", "mynet", "--net", "other:IP=10.1.0.9;K=V")
	for _, want := range []string{"ID:", "Name:     web", "Netns:    /run/kurma/netns/", "Created:"} {
		if !strings.Contains(out, want) {
			t.Errorf("pod create output lacks %q:\n%s", want, out)
		}
	}
	netTable := out[strings.Index(out, "NETWORK"):]
	if got := header(netTable); !slices.Equal(got, []string{"NETWORK", "INTERFACE", "ADDRESSES", "GATEWAY", "IMAGE"}) {
		t.Errorf("pod network columns %q", got)
	}
	if !strings.Contains(netTable, "other") || !strings.Contains(netTable, "eth1") || !strings.Contains(netTable, "10.204.0.3/16") {
		t.Errorf("pod network rows:\n%s", netTable)
	}

	out = mustRun(t, sock, "pod", "ls")
	if got := header(out); !slices.Equal(got, []string{"ID", "NAME", "OWNER", "NETWORKS", "ADDRESSES", "CREATED", "STATUS"}) {
		t.Errorf("pod ls columns %q\n%s", got, out)
	}
	if !strings.Contains(out, "mynet(eth0),other(eth1)") || !strings.Contains(out, "ready") {
		t.Errorf("pod ls:\n%s", out)
	}

	out = mustRun(t, sock, "net", "ls")
	if got := header(out); !slices.Equal(got, []string{"NETWORK", "GEN", "STATE", "DEFAULT", "ROLE", "POLICY", "RESTARTS", "PID", "IMAGE", "REASON"}) {
		t.Errorf("net ls columns %q\n%s", got, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "mynet") || !strings.Contains(lines[1], "running") ||
		!strings.Contains(lines[1], "yes") || !strings.Contains(lines[3], "failed") ||
		!strings.Contains(lines[3], "main exited with status 1") {
		t.Errorf("net ls:\n%s", out)
	}

	out = mustRun(t, sock, "image", "ls")
	if got := header(out); !slices.Equal(got, []string{"ID", "NAME", "VERSION", "FORMAT", "SIZE", "VERIFIED", "FETCHED", "USED BY"}) {
		t.Errorf("image ls columns %q\n%s", got, out)
	}
	if !regexp.MustCompile(`(?m)^sha512-[0-9a-f]{12}  +kurma.io/net/mynet `).MatchString(out) || !strings.Contains(out, "4.0 MiB") ||
		!strings.Contains(out, "key 89ABCDEF01234567") {
		t.Errorf("image ls:\n%s", out)
	}

	out = mustRun(t, sock, "version")
	if !strings.Contains(out, "Client:     dev") || !strings.Contains(out, "Server:     test") || !strings.Contains(out, "Pods:       1") {
		t.Errorf("version:\n%s", out)
	}
}

func keys(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func checkPodJSON(t *testing.T, out string, wantNets ...string) string {
	t.Helper()
	var pod map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &pod); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	if got := keys(pod); !slices.Equal(got, []string{"attachments", "created", "id", "name", "netns", "networks", "state"}) {
		t.Errorf("pod keys %q", got)
	}
	var id, netns, created string
	json.Unmarshal(pod["id"], &id)
	json.Unmarshal(pod["netns"], &netns)
	json.Unmarshal(pod["created"], &created)
	if len(id) != 36 || netns != "/run/kurma/netns/"+id {
		t.Errorf("id %q netns %q", id, netns)
	}
	if _, err := time.Parse(time.RFC3339, created); err != nil {
		t.Errorf("created %q is not RFC 3339: %v", created, err)
	}
	// The attachments, and the same under their deprecated name (each
	// naming its network "name"), for kurma-cni of the previous release.
	for _, list := range []struct {
		key, network string
		keys         []string
	}{
		{"attachments", "network", []string{"image", "interface", "network", "raw_result", "result"}},
		{"networks", "name", []string{"image", "interface", "name", "result"}},
	} {
		var atts []map[string]json.RawMessage
		if err := json.Unmarshal(pod[list.key], &atts); err != nil {
			t.Fatal(err)
		}
		if len(atts) != len(wantNets) {
			t.Fatalf("%s %s, want %q", list.key, pod[list.key], wantNets)
		}
		for i, a := range atts {
			if got := keys(a); !slices.Equal(got, list.keys) {
				t.Errorf("%s keys %q", list.key, got)
			}
			var network string
			json.Unmarshal(a[list.network], &network)
			var res struct {
				CNIVersion string `json:"cniVersion"`
				IPs        []any  `json:"ips"`
			}
			if err := json.Unmarshal(a["result"], &res); err != nil || res.CNIVersion != "1.1.0" || len(res.IPs) != 1 {
				t.Errorf("result %s: %v", a["result"], err)
			}
			if network != wantNets[i] {
				t.Errorf("%s %d is %q, want %q", list.key, i, network, wantNets[i])
			}
		}
	}
	return id
}

// TestInspectRaw: --raw prints each network's add output byte for byte in
// attach order, --net one network's; the flags that make no sense together
// are usage errors.
func TestInspectRaw(t *testing.T) {
	sock, _ := serve(t)
	var p api.Pod
	if err := json.Unmarshal([]byte(mustRun(t, sock, "pod", "create", "--name", "two", "--net", "other", "--net", "mynet", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	raw := map[string]string{}
	for _, a := range p.Attachments {
		raw[a.Network] = a.RawResult
	}
	if raw["other"] == "" || raw["mynet"] == "" {
		t.Fatalf("created pod carries no raw results: %+v", p.Attachments)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"pod", "inspect", "two", "--raw"}, raw["other"] + raw["mynet"]},
		{[]string{"pod", "inspect", p.ID[:8], "--raw", "--net", "mynet"}, raw["mynet"]},
	} {
		if got := mustRun(t, sock, tt.args...); got != tt.want {
			t.Errorf("%v printed %q, want %q", tt.args, got, tt.want)
		}
	}
	for _, tt := range []struct {
		args  []string
		usage bool
		msg   string
	}{
		{[]string{"pod", "inspect", "two", "--raw", "-o", "json"}, true, "--raw prints the plugins' own bytes and takes no -o json"},
		{[]string{"pod", "inspect", "two", "--net", "mynet"}, true, "--net goes with --raw"},
		{[]string{"pod", "inspect", "two", "--raw", "--net", "broken"}, false, `is not attached to network "broken" (its networks: other, mynet)`},
	} {
		out, errOut, code := kurmactl(t, sock, tt.args...)
		if code == 0 || out != "" || !strings.Contains(errOut, tt.msg) || strings.Contains(errOut, "--help") != tt.usage {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q (usage hint: %v)", tt.args, code, out, errOut, tt.msg, tt.usage)
		}
	}
}

// TestPrintRaw: what --raw cannot show as the plugin wrote it is said on
// stderr, the rest printed.
func TestPrintRaw(t *testing.T) {
	pod := &api.Pod{ID: "p", Attachments: []api.Attachment{
		{Network: "old"},
		{Network: "big", RawResult: "{\"x\": \"aa", RawResultTruncated: true},
	}}
	var out, errOut bytes.Buffer
	if err := printRaw(&out, &errOut, pod, ""); err != nil {
		t.Fatal(err)
	}
	if out.String() != "{\"x\": \"aa" {
		t.Errorf("stdout %q", out.String())
	}
	for _, want := range []string{"network old: no raw output kept", "network big: the plugin wrote more; kurmad kept the first 9 bytes"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr %q lacks %q", errOut.String(), want)
		}
	}
}

func TestJSONShapes(t *testing.T) {
	sock, b := serve(t)

	id := checkPodJSON(t, mustRun(t, sock, "pod", "create", "-o", "json"), "mynet")
	if got := b.Created()[0]; got.Name != "" || len(got.Networks) != 0 {
		t.Errorf("create without flags sent %+v", got)
	}
	id2 := checkPodJSON(t, mustRun(t, sock, "pod", "create", "--name", "db", "--net", "other:IP=10.1.0.9;K=V,W", "--net", "mynet", "-o", "json"), "other", "mynet")
	if got := b.Created()[1]; got.Name != "db" || !slices.Equal(got.Networks, []string{"other:IP=10.1.0.9;K=V,W", "mynet"}) {
		t.Errorf("create sent %+v", got)
	}

	// inspect by full ID, unique prefix, and name.
	for _, ref := range []string{id, id[:8], "db"} {
		want := id
		if ref == "db" {
			want = id2
		}
		if got := checkPodJSON(t, mustRun(t, sock, "pod", "inspect", "-o", "json", ref), map[string][]string{id: {"mynet"}, id2: {"other", "mynet"}}[want]...); got != want {
			t.Errorf("inspect %q gave %s, want %s", ref, got, want)
		}
	}

	var pods []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(mustRun(t, sock, "pod", "ls", "-o", "json")), &pods); err != nil || len(pods) != 2 {
		t.Fatalf("pod ls -o json: %d pods, %v", len(pods), err)
	}

	var nets []map[string]json.RawMessage
	out := mustRun(t, sock, "net", "ls", "-o", "json")
	if err := json.Unmarshal([]byte(out), &nets); err != nil || len(nets) != 3 {
		t.Fatalf("net ls -o json: %v\n%s", err, out)
	}
	// "name" is the deprecated name of "network", still answered.
	required := []string{"generation", "image", "name", "network", "pid", "pods", "reason", "restarts", "role", "state"}
	for _, n := range nets {
		for _, k := range required {
			if _, ok := n[k]; !ok {
				t.Errorf("network %s lacks %q", out, k)
			}
		}
		for k := range n {
			if !slices.Contains(required, k) && k != "default" && k != "since" {
				t.Errorf("network has unexpected key %q", k)
			}
		}
	}
	var broken api.Generation
	json.Unmarshal(mustJSON(nets[2]), &broken)
	if broken.State != "failed" || broken.Restarts != 3 || broken.Reason == "" {
		t.Errorf("broken network %+v", broken)
	}

	var v struct {
		Client struct{ Version string }
		Server api.Info
	}
	if err := json.Unmarshal([]byte(mustRun(t, sock, "version", "-o", "json")), &v); err != nil || v.Client.Version != "dev" || v.Server.Version != "test" {
		t.Errorf("version -o json = %+v, %v", v, err)
	}
	if out := mustRun(t, sock, "pod", "rm", "-o", "json", id, id2); strings.TrimSpace(out) != `[
  "`+id+`",
  "`+id2+`"
]` {
		t.Errorf("pod rm -o json:\n%s", out)
	}
	if out := mustRun(t, sock, "pod", "ls", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("empty pod ls -o json = %q", out)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestPodRmContinuesOnError(t *testing.T) {
	sock, b := serve(t)
	id1 := checkPodJSON(t, mustRun(t, sock, "pod", "create", "-o", "json"), "mynet")
	id2 := checkPodJSON(t, mustRun(t, sock, "pod", "create", "-o", "json"), "mynet")

	out, errOut, code := kurmactl(t, sock, "pod", "rm", id1, "bogus", id2)
	if code == 0 {
		t.Error("exit 0 although one pod failed")
	}
	if errOut != "kurmactl: pod bogus: pod \"bogus\" not found\n" {
		t.Errorf("stderr %q", errOut)
	}
	if out != id1+"\n"+id2+"\n" {
		t.Errorf("stdout %q", out)
	}
	if pods, _ := b.ListPods(context.Background()); len(pods) != 0 {
		t.Errorf("%d pods left", len(pods))
	}
}

func TestAPIErrorOnStderr(t *testing.T) {
	sock, b := serve(t)
	b.Hook = func(method, name string) error {
		if method == "CreatePod" && name == "slow" {
			return api.Errorf(api.CodePluginTimeout, `network "mynet": /opt/network/add timed out after 1m0s`)
		}
		return nil
	}
	out, errOut, code := kurmactl(t, sock, "pod", "create", "--name", "slow", "--net", "mynet")
	if code == 0 || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	if errOut != "kurmactl: network \"mynet\": /opt/network/add timed out after 1m0s\n" {
		t.Errorf("stderr %q", errOut)
	}

	_, errOut, code = kurmactl(t, sock, "pod", "create", "--net", "nope")
	if code == 0 || !strings.HasPrefix(errOut, `kurmactl: unknown network "nope" (known: mynet, other, broken)`) || strings.Contains(errOut, "Usage") {
		t.Errorf("unknown network: exit %d stderr %q", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	sock, _ := serve(t)
	for _, args := range [][]string{
		{"pod", "inspect"},
		{"pod", "frobnicate"},
		{"pod", "ls", "-o", "yaml"},
		{"pod", "create", "--bogus"},
	} {
		_, errOut, code := kurmactl(t, sock, args...)
		if code == 0 || !strings.HasPrefix(errOut, "kurmactl: ") || !strings.Contains(errOut, "--help") {
			t.Errorf("%q: exit %d stderr %q", args, code, errOut)
		}
	}
}

// TestInputRefusedAtOnce: what kurmactl can tell is wrong from its own
// arguments it says before asking kurmad anything, with the fix, and
// exits non-zero: here no kurmad answers at all.
func TestInputRefusedAtOnce(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"pod", "rm", ""}, `argument 1 of "kurmactl pod rm" is empty: give a pod ID`},
		{[]string{"pod", "rm", "web", " "}, `argument 2 of "kurmactl pod rm" is empty`},
		{[]string{"pod", "inspect", ""}, "give a pod ID"},
		{[]string{"pod", "check", ""}, "give a pod ID"},
		{[]string{"image", "rm", ""}, "give an image ID"},
		{[]string{"net", "retry", ""}, "give a network name"},
		{[]string{"image", "pull", "/abs/path/net.aci"}, `did you mean "file:///abs/path/net.aci"?`},
		{[]string{"image", "pull", ""}, "give an image URI"},
		{[]string{"pod", "create", "--publish", "18090"}, "HOSTPORT:CONTAINERPORT"},
		{[]string{"pod", "create", "--mac", "ff:ff:ff:ff:ff:ff"}, "is a multicast or broadcast address"},
		{[]string{"pod", "create", "--mac", "00:00:00:00:00:00"}, "all zeros"},
		{[]string{"pod", "create", "--ip", "10.1.2"}, `"10.1.2" is not an IP address`},
		{[]string{"pod", "create", "--bandwidth", "mynet:fast"}, `"mynet:fast" is not a rate`},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "kurmactl completion"`},
	} {
		_, errOut, code := kurmactl(t, none, tt.args...)
		if code == 0 || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, "cannot reach kurmad") {
			t.Errorf("%q: exit %d, stderr %q; want it refused at once saying %q", tt.args, code, errOut, tt.want)
		}
	}
}

// TestPublishToANetworkThePodDoesNotJoin: a NAME: prefix naming no network
// of the pod is said to be that, not a bad port.
func TestPublishToANetworkThePodDoesNotJoin(t *testing.T) {
	sock, _ := serve(t)
	_, errOut, code := kurmactl(t, sock, "pod", "create", "--net", "mynet", "--publish", "nosuch:8080:80")
	if code == 0 || !strings.Contains(errOut, `--publish nosuch:8080:80: the pod does not join network "nosuch" (it joins: mynet)`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestSocketThatIsNoSocket: a --socket naming a regular file is said to be
// one, not "connection refused (is kurmad running?)".
func TestSocketThatIsNoSocket(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kurmad.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := kurmactl(t, file, "net", "ls")
	if code == 0 || !strings.Contains(errOut, "cannot reach kurmad at "+file+": it is not a socket (a regular file)") || strings.Contains(errOut, "is kurmad running") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestImageCommands(t *testing.T) {
	sock, _ := serve(t)

	out, errOut, code := kurmactl(t, sock, "image", "pull", "docker://example.com/kurma/bridge:1")
	if code != 0 {
		t.Fatalf("pull: exit %d: %s", code, errOut)
	}
	// stderr is not a terminal here: plain lines, the last one complete.
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if !strings.HasPrefix(lines[0], "pulling docker://example.com/kurma/bridge:1: ") ||
		!strings.HasSuffix(lines[len(lines)-1], "1.0 MiB / 1.0 MiB (100%)") || strings.Contains(errOut, "\r") {
		t.Errorf("progress:\n%s", errOut)
	}
	if !strings.Contains(out, "example.com/kurma/bridge:1") || !strings.HasPrefix(out, "ID ") {
		t.Errorf("pull output:\n%s", out)
	}

	var img api.Image
	out = mustRun(t, sock, "image", "pull", "-o", "json", "docker://example.com/kurma/ptp:1")
	if err := json.Unmarshal([]byte(out), &img); err != nil || img.Source != "docker://example.com/kurma/ptp:1" {
		t.Fatalf("pull -o json: %v\n%s", err, out)
	}

	// In use: refused with the server's message.
	var before []api.Image
	json.Unmarshal([]byte(mustRun(t, sock, "image", "ls", "-o", "json")), &before)
	_, errOut, code = kurmactl(t, sock, "image", "rm", before[0].ID)
	if code == 0 || !strings.Contains(errOut, "is used by network mynet") {
		t.Errorf("rm in use: exit %d stderr %q", code, errOut)
	}
	// By unique prefix.
	out = mustRun(t, sock, "image", "rm", img.ID[:len(img.ID)-3])
	if out != img.ID+"\n" {
		t.Errorf("rm by prefix printed %q", out)
	}
	var imgs []api.Image
	json.Unmarshal([]byte(mustRun(t, sock, "image", "ls", "-o", "json")), &imgs)
	if len(imgs) != 4 {
		t.Errorf("%d images after rm, want 4", len(imgs))
	}
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, uri: "x", tty: true}
	p.update(0, 100)
	p.update(100, 100)
	p.finish(true)
	if !strings.Contains(buf.String(), "\r\033[K[==============================] 100%  100 B / 100 B\n") {
		t.Errorf("bar %q", buf.String())
	}
	if got := (&progress{uri: "x"}).bar(50, 100); !strings.HasPrefix(got, "[===============>              ]  50%") {
		t.Errorf("half bar %q", got)
	}
}

func TestSocketFromEnvAndUnreachable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.sock")
	t.Setenv("KURMA_SOCKET", missing)
	_, errOut, code := kurmactl(t, "", "net", "ls")
	want := "kurmactl: cannot reach kurmad at " + missing + ": no such file or directory (is kurmad running?)\n" +
		"kurmactl: the socket is " + missing + " (KURMA_SOCKET); name kurmad's with --socket, KURMA_SOCKET, or --config (its config's run_dir)\n"
	if code == 0 || errOut != want {
		t.Errorf("exit %d stderr %q, want %q", code, errOut, want)
	}

	sock, _ := serve(t)
	t.Setenv("KURMA_SOCKET", sock)
	if _, errOut, code := kurmactl(t, "", "net", "ls"); code != 0 {
		t.Errorf("KURMA_SOCKET not used: %s", errOut)
	}
	// The flag wins over the environment.
	if _, _, code := kurmactl(t, missing, "net", "ls"); code == 0 {
		t.Error("--socket did not override KURMA_SOCKET")
	}
}

// TestSocketFromConfig: without --socket or KURMA_SOCKET, kurmactl finds
// the socket where kurmad puts it, in the run_dir of kurmad's config
// (--config); when nothing answers, it says where it looked and why.
func TestSocketFromConfig(t *testing.T) {
	t.Setenv("KURMA_SOCKET", "")
	sock, _ := serve(t)
	cfg := filepath.Join(t.TempDir(), "kurmad.json")
	if err := os.WriteFile(cfg, []byte(`{"run_dir": "`+filepath.Dir(sock)+`", "pod_networks": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := kurmactl(t, "", "--config", cfg, "net", "ls"); code != 0 {
		t.Errorf("kurmactl --config with kurmad's run_dir: exit %d: %s", code, errOut)
	}
	empty := t.TempDir()
	if err := os.WriteFile(cfg, []byte(`{"run_dir": "`+empty+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := kurmactl(t, "", "--config", cfg, "net", "ls")
	if want := "the socket is " + filepath.Join(empty, "kurmad.sock") + " (run_dir of " + cfg + ")"; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("exit %d stderr %q, want it to say %q", code, errOut, want)
	}
	_, errOut, _ = kurmactl(t, "", "--config", filepath.Join(empty, "none.json"), "net", "ls")
	if want := "the socket is " + api.DefaultSocket + " (the default: open " + filepath.Join(empty, "none.json"); !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want it to say %q", errOut, want)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 4 << 20: "4.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestVerifiedColumn(t *testing.T) {
	for _, c := range []struct {
		v    *api.ImageVerification
		want string
	}{
		{nil, "none"},
		{&api.ImageVerification{Mode: "none", Method: "none"}, "none"},
		{&api.ImageVerification{Mode: "if-signed", Method: "none"}, "none"},
		{&api.ImageVerification{Mode: "required", Method: "signature", Key: "0123456789ABCDEF0123456789ABCDEF01234567"}, "key 89ABCDEF01234567"},
		{&api.ImageVerification{Mode: "required", Method: "policy", Policy: "sha256:00"}, "policy"},
		{&api.ImageVerification{Mode: "if-signed", Method: "policy", Policy: "sha256:00"}, "policy, if-signed"},
	} {
		if got := verified(c.v); got != c.want {
			t.Errorf("verified(%+v) = %q, want %q", c.v, got, c.want)
		}
	}
}

// TestVersionCompletion: --version prints the client's version without
// a kurmad (nor its config); kurmactl alone prints its help; cobra's
// completion writes a shell's script. (man: man_test.go.)
func TestVersionCompletion(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.json")
	for _, args := range [][]string{{"--version"}, {"-v"}, {"--config", missing, "--version"}, {"-o", "yaml", "-v"}} {
		if out, errOut, code := kurmactl(t, "", args...); code != 0 || out != "kurmactl "+version+"\n" || errOut != "" {
			t.Errorf("%q: exit %d %q %q", args, code, out, errOut)
		}
	}
	if _, errOut, code := kurmactl(t, "", "--version", "extra"); code == 0 || !strings.Contains(errOut, `unknown command "extra"`) {
		t.Errorf("--version extra: exit %d %q", code, errOut)
	}
	if out, errOut, code := kurmactl(t, "", "pod", "--version"); code == 0 || out != "" || !strings.Contains(errOut, "--version") {
		t.Errorf("pod --version (root's flag only): exit %d %q %q", code, out, errOut)
	}
	if out, errOut, code := kurmactl(t, ""); code != 0 || !strings.Contains(out, "Available Commands:") || errOut != "" {
		t.Errorf("no arguments: exit %d %q %q", code, out, errOut)
	}
	for shell, want := range map[string]string{"bash": "__start_kurmactl", "zsh": "#compdef kurmactl", "fish": "complete -c kurmactl"} {
		if out, errOut, code := kurmactl(t, "", "completion", shell); code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes without %q", shell, code, errOut, len(out), want)
		}
	}
}

// TestManListed: kurmactl man, which README's install runs, is in the
// help like every other command.
func TestManListed(t *testing.T) {
	out, _, code := kurmactl(t, "", "--help")
	if code != 0 || !strings.Contains(out, "\n  man ") {
		t.Errorf("kurmactl --help (exit %d) does not list man:\n%s", code, out)
	}
}

// TestNetLsRoles: net ls shows each network's role, the networks the
// policy network polices and, on each of those, who polices it.
func TestNetLsRoles(t *testing.T) {
	var b strings.Builder
	gens := []api.Generation{
		{Network: "podnet", Generation: 1, State: api.StateRunning, Default: true, Role: api.RoleAttach, NetworkPolicy: true},
		{Network: "web", Generation: 3, State: api.StateRunning, Role: api.RoleAttach, NetworkPolicy: true},
		{Network: "plain", Generation: 1, State: api.StateRunning, Role: api.RoleAttach},
		{Network: "netpol", Generation: 2, State: api.StateRunning, Role: api.RolePolicy, PolicyNetworks: []string{"podnet", "web"}},
		{Network: "netpol", Generation: 1, State: api.StateRetiring, Role: api.RolePolicy},
	}
	if err := printGenerations(&b, &cli{}, gens); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"podnet", "1", "running", "yes", "attach", "by", "netpol"},
		{"web", "3", "running", "-", "attach", "by", "netpol"},
		{"plain", "1", "running", "-", "attach", "-"},
		{"netpol", "2", "running", "-", "policy", "podnet,web"},
		{"netpol", "1", "retiring", "-", "policy", "-"},
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != len(want)+1 {
		t.Fatalf("net ls:\n%s", b.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i+1]); !slices.Equal(got[:len(w)], w) {
			t.Errorf("row %d = %q, want it to start %q", i, got, w)
		}
	}
}
