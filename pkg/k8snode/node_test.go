package k8snode

// Tests above two seams: the API server, a real HTTPS server answering as
// Kubernetes does for the few objects kurma-node reads; and kurmad, the
// real API server and client over a fake backend (apitest). The real
// thing, on a real cluster, is test/k8s (make k8s-test).

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
	"github.com/kurma-project/kurma/pkg/kurmacni"
)

func TestRender(t *testing.T) {
	tmpl := []byte(`{"pod_networks":[{"name":"podnet","ipam":{"ranges":[[{"subnet":"__NODE_POD_CIDR__"}]]},"containerInterface":"eth{{num}}"}]}`)
	node := &NodeObject{}
	node.Metadata.Name = "n1"
	if _, err := Render(tmpl, Input{Node: node}); !errors.Is(err, ErrNoPodCIDR) {
		t.Errorf("a node without a pod CIDR: %v, want ErrNoPodCIDR", err)
	}
	node.Spec.PodCIDR = "10.244.3.0/24"
	out, err := Render(tmpl, Input{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"pod_networks":[{"name":"podnet","ipam":{"ranges":[[{"subnet":"10.244.3.0/24"}]]},"containerInterface":"eth{{num}}"}]}`
	if string(out) != want {
		t.Errorf("rendered %s", out)
	}
	node.Spec.PodCIDR = "10.244.3.0"
	if _, err := Render(tmpl, Input{Node: node}); err == nil || !strings.Contains(err.Error(), "spec.podCIDR") {
		t.Errorf("a pod CIDR that is not one: %v", err)
	}
	plain := []byte(`{"pod_networks":[]}`)
	if out, err := Render(plain, Input{Node: &NodeObject{}}); err != nil || string(out) != string(plain) {
		t.Errorf("a template without the placeholder: %s, %v", out, err)
	}
}

// TestRenderPlaceholders: every placeholder on a dual-stack node, and
// what each waits for (or refuses) when the node or kurma-node lacks it.
func TestRenderPlaceholders(t *testing.T) {
	node := &NodeObject{}
	node.Metadata.Name = "n2"
	node.Spec.PodCIDR = "10.244.2.0/24"
	node.Spec.PodCIDRs = []string{"10.244.2.0/24", "fd00:10:244:2::/64"}
	node.Status.Addresses = []NodeAddress{{"Hostname", "n2"}, {"InternalIP", "10.99.0.12"}, {"InternalIP", "fd00:99::12"}}
	ifaceOf := func(ip netip.Addr) (string, error) {
		if ip.String() != "10.99.0.12" {
			return "", fmt.Errorf("asked for %s", ip)
		}
		return "eth0", nil
	}
	sp := &Span{Subnet: netip.MustParsePrefix("10.77.0.0/16"), Bits: 24}
	in := Input{Node: node, ClusterCIDRs: []string{"10.244.0.0/16", "fd00:10:244::/56"}, InterfaceOf: ifaceOf,
		Span: sp, Block: netip.MustParsePrefix("10.77.3.0/24")}
	var names []string
	for _, p := range Placeholders() {
		names = append(names, p.Name)
	}
	tmpl := []byte(strings.Join(names, "|"))
	out, err := Render(tmpl, in)
	if err != nil {
		t.Fatal(err)
	}
	want := "n2|10.244.2.0/24|10.244.2.0/24,fd00:10:244:2::/64|10.244.0.0/16|10.244.0.0/16,fd00:10:244::/56|10.99.0.12|10.99.0.12,fd00:99::12|10.77.3.0/24|10.77.0.0/16|eth0"
	if string(out) != want {
		t.Errorf("rendered\n%s\nwant\n%s", out, want)
	}

	single := *node
	single.Spec.PodCIDRs = nil
	if out, err := Render([]byte("__NODE_POD_CIDRS__"), Input{Node: &single}); err != nil || string(out) != "10.244.2.0/24" {
		t.Errorf("__NODE_POD_CIDRS__ of a node with only spec.podCIDR: %s, %v", out, err)
	}
	bare := &NodeObject{}
	bare.Spec.PodCIDR = "10.244.2.0/24"
	for _, tt := range []struct {
		tmpl string
		in   Input
		want error
	}{
		{"__CLUSTER_CIDRS__", Input{Node: node}, ErrNoClusterCIDR},
		{"__NODE_IP__", Input{Node: bare}, ErrNoNodeIP},
		{"__NODE_INTERFACE__", Input{Node: bare}, ErrNoNodeIP},
		{"__NODE_POD_CIDRS__", Input{Node: &NodeObject{}}, ErrNoPodCIDR},
		{"__NODE_BLOCK__", Input{Node: node}, ErrNotSpanned},
		{"__NETWORK_SUBNET__", Input{Node: node}, ErrNotSpanned},
		{"__NODE_BLOCK__", Input{Node: node, Span: sp}, ErrNoBlock},
	} {
		if _, err := Render([]byte(tt.tmpl), tt.in); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.tmpl, err, tt.want)
		}
	}
	// Both families given, on a single-stack node: its family's only.
	for _, tt := range []struct{ podCIDRs, want string }{
		{"10.244.2.0/24", "10.244.0.0/16"},
		{"fd00:10:244:2::/64", "fd00:10:244::/56"},
	} {
		one := &NodeObject{}
		one.Spec.PodCIDR, one.Spec.PodCIDRs = tt.podCIDRs, []string{tt.podCIDRs}
		if out, err := Render([]byte("__CLUSTER_CIDRS__"), Input{Node: one, ClusterCIDRs: in.ClusterCIDRs}); err != nil || string(out) != tt.want {
			t.Errorf("__CLUSTER_CIDRS__ of %v on a node with pod CIDR %s: %s, %v; want %s", in.ClusterCIDRs, tt.podCIDRs, out, err, tt.want)
		}
	}
	if _, err := Render([]byte("__CLUSTER_CIDRS__"), Input{Node: &single, ClusterCIDRs: []string{"fd00:10:244::/56"}}); !errors.Is(err, ErrNoClusterCIDR) {
		t.Errorf("__CLUSTER_CIDRS__ with only an IPv6 cluster CIDR on an IPv4 node: %v, want %v", err, ErrNoClusterCIDR)
	}
	if _, err := Render([]byte("__CLUSTER_CIDRS__"), Input{Node: &NodeObject{}, ClusterCIDRs: in.ClusterCIDRs}); !errors.Is(err, ErrNoPodCIDR) {
		t.Errorf("__CLUSTER_CIDRS__ on a node without pod CIDRs: %v, want %v (wait)", err, ErrNoPodCIDR)
	}
	if _, err := Render([]byte("__CLUSTER_CIDR__"), Input{Node: node, ClusterCIDRs: []string{"10.244.0.0/16", "10.245.0.0/16"}}); err == nil {
		t.Error("two IPv4 cluster CIDRs were accepted")
	}
	// The host's own lookup finds loopback's address.
	if name, err := HostInterfaceOf(netip.MustParseAddr("127.0.0.1")); err != nil || name != "lo" {
		t.Errorf("HostInterfaceOf(127.0.0.1) = %q, %v", name, err)
	}
}

// TestPlaceholdersDocumented: docs/runtimes.md and deploy/kubernetes's
// README name every placeholder kurma-node fills.
func TestPlaceholdersDocumented(t *testing.T) {
	for _, doc := range []string{"../../docs/runtimes.md", "../../deploy/kubernetes/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range Placeholders() {
			if !strings.Contains(string(b), "`"+p.Name+"`") {
				t.Errorf("%s does not name the placeholder %s", doc, p.Name)
			}
		}
	}
}

// conflist is a node's conflist for kurmad at sock, naming networks.
func conflist(sock string, networks ...string) []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "cniVersions": []string{"1.0.0", "1.1.0"}, "name": "kurma",
		"plugins": []map[string]any{{"type": kurmacni.Type, "network": networks, "socket": sock}}})
	return b
}

// TestStatus: ready while every network of the conflist runs; a failed
// one is CNI code 50 naming it; a conflist without kurma-cni is an error.
func TestStatus(t *testing.T) {
	b := apitest.New([]string{"podnet", "localnet", "broken"}, 1)
	b.SetGeneration(api.Generation{Network: "broken", State: api.StateFailed, Reason: "main exited"})
	sock := apitest.Serve(t, b)
	if err := Status(conflist(sock, "podnet", "localnet")); err != nil {
		t.Errorf("running networks: %v", err)
	}
	var e *types.Error
	if err := Status(conflist(sock, "podnet", "broken")); !errors.As(err, &e) || e.Code != kurmacni.ErrNotAvailable || !strings.Contains(e.Msg, `"broken"`) {
		t.Errorf("a failed network: %v, want code 50 naming it", err)
	}
	if err := Status([]byte(`{"name":"x","plugins":[{"type":"bridge"}]}`)); err == nil {
		t.Error("a conflist without kurma-cni passed")
	}
}

// TestInstall: Install puts kurma-cni and the conflist in place (and
// replaces an older conflist), Installed tells it, Uninstall removes both
// and is idempotent.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "image-kurma-cni")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := &CNI{Binary: bin, Conflist: conflist("/run/kurma/kurmad.sock", "podnet"), BinDir: filepath.Join(dir, "bin"),
		ConfDir: filepath.Join(dir, "net.d"), ConflistName: "00-kurma.conflist"}
	for _, d := range []string{c.BinDir, c.ConfDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.ConfDir, c.ConflistName), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.Installed() {
		t.Error("Installed with another conflist in place")
	}
	if err := c.Install(); err != nil {
		t.Fatal(err)
	}
	if !c.Installed() {
		t.Error("not Installed after Install")
	}
	fi, err := os.Stat(filepath.Join(c.BinDir, "kurma-cni"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("kurma-cni: %v, mode %v", err, fi.Mode())
	}
	entries, _ := os.ReadDir(c.ConfDir)
	if len(entries) != 1 {
		t.Errorf("the conf dir holds %d files, want the conflist alone (no temp file left)", len(entries))
	}
	for range 2 {
		if err := c.Uninstall(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{c.BinDir, c.ConfDir} {
		if entries, _ := os.ReadDir(d); len(entries) != 0 {
			t.Errorf("%s after Uninstall: %v", d, entries)
		}
	}
}

// apiServer answers GETs of objects as Kubernetes does: the object, or a
// Status with the code; it checks the bearer token.
func apiServer(t *testing.T, objects map[string]any, codes map[string]int) *Cluster {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if code, ok := codes[r.URL.Path]; ok {
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "code": code, "message": "as told"})
			return
		}
		obj, ok := objects[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "code": 404, "reason": "NotFound", "message": r.URL.Path + " not found"})
			return
		}
		_ = json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "https://"), ":")
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	c, err := InCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	podPath = "/api/v1/namespaces/kurma-system/pods/kurmad-x1"
	dsPath  = "/apis/apps/v1/namespaces/kurma-system/daemonsets/kurmad"
)

func pod(owner string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": "kurmad-x1", "namespace": "kurma-system",
		"ownerReferences": []map[string]any{{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kurmad", "uid": owner, "controller": true}}}}
}

func ds(uid string, deleting bool) map[string]any {
	m := map[string]any{"name": "kurmad", "namespace": "kurma-system", "uid": uid}
	if deleting {
		m["deletionTimestamp"] = "2026-01-01T00:00:00Z"
	}
	return map[string]any{"metadata": m}
}

// TestUninstalling: a stopping pod removes kurma-cni only when kurma is
// being removed: its DaemonSet gone, being deleted or replaced, or its
// access to the API revoked; not when the DaemonSet replaces the pod, and
// not when it cannot tell.
func TestUninstalling(t *testing.T) {
	tests := []struct {
		name    string
		objects map[string]any
		codes   map[string]int
		want    bool
	}{
		{"rolling update: the DaemonSet stays", map[string]any{podPath: pod("u1"), dsPath: ds("u1", false)}, nil, false},
		{"the DaemonSet is deleted", map[string]any{podPath: pod("u1")}, nil, true},
		{"the DaemonSet is being deleted", map[string]any{podPath: pod("u1"), dsPath: ds("u1", true)}, nil, true},
		{"a new DaemonSet of that name", map[string]any{podPath: pod("u1"), dsPath: ds("u2", false)}, nil, true},
		{"the pod is gone", map[string]any{}, nil, true},
		{"RBAC removed", map[string]any{podPath: pod("u1")}, map[string]int{podPath: 403}, true},
		{"the service account removed", map[string]any{}, map[string]int{podPath: 401}, true},
		{"the API server fails", map[string]any{podPath: pod("u1"), dsPath: ds("u1", false)}, map[string]int{dsPath: 503}, false},
		{"not a DaemonSet's pod", map[string]any{podPath: map[string]any{"metadata": map[string]any{"name": "kurmad-x1"}}}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Node{PodName: "kurmad-x1", PodNamespace: "kurma-system", Cluster: apiServer(t, tt.objects, tt.codes), Log: logrus.New()}
			got, why := n.Uninstalling(context.Background())
			if got != tt.want {
				t.Errorf("Uninstalling = %v (%s), want %v", got, why, tt.want)
			}
		})
	}
}

// TestNodeObject: the Node's pod CIDR as the API server gives it; a
// missing Node is a StatusError that Gone recognizes.
func TestNodeObject(t *testing.T) {
	c := apiServer(t, map[string]any{"/api/v1/nodes/n1": map[string]any{"metadata": map[string]any{"name": "n1"},
		"spec": map[string]any{"podCIDR": "10.244.1.0/24", "podCIDRs": []string{"10.244.1.0/24"}}}}, nil)
	n, err := c.Node(context.Background(), "n1")
	if err != nil || n.Spec.PodCIDR != "10.244.1.0/24" {
		t.Errorf("node %+v, %v", n, err)
	}
	_, err = c.Node(context.Background(), "n2")
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 404 || !Gone(err) {
		t.Errorf("a missing node: %v", err)
	}
}

// TestInstallWhenReady: kurma-cni is installed only once every network of
// the conflist runs: not while podnet is starting, where it waits for
// kurmad's next change (no STATUS round on a timer meanwhile), and at
// once when that change makes it run.
func TestInstallWhenReady(t *testing.T) {
	b := apitest.New([]string{"podnet"}, 1)
	b.SetGeneration(api.Generation{Network: "podnet", State: api.StateStarting})
	var mu sync.Mutex
	asked := 0
	b.Hook = func(method, arg string) error {
		if method == "Networks" {
			mu.Lock()
			asked++
			mu.Unlock()
		}
		return nil
	}
	sock := apitest.Serve(t, b)
	n := installNode(t, sock, logrus.New(), "")
	n.Poll = time.Hour // a timer would not come in time: only the change can install
	done := make(chan error, 1)
	go func() { done <- n.installWhenReady(context.Background()) }()
	// Read by STATUS, by the first wait (answered at once: no revision
	// yet), by STATUS again and by the wait held for a change.
	b.WaitRevisionReads(t, 4)
	if n.CNI.Installed() {
		t.Fatal("installed while podnet was starting")
	}
	b.SetGeneration(api.Generation{Network: "podnet", State: api.StateRunning})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("podnet runs, and kurma-cni is still not installed: the change did not reach the install")
	}
	if !n.CNI.Installed() {
		t.Error("not installed once podnet ran")
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 5 {
		t.Errorf("kurmad's networks read %d times, want 5 (STATUS while starting, the first wait, STATUS again, the held wait's answer, STATUS once running)", asked)
	}
}

// TestInstallRetries: an install that fails once the networks run (the
// node's CNI bin dir missing) is logged and retried, and succeeds once the
// dir is there, rather than leaving the node without kurma-cni for good.
func TestInstallRetries(t *testing.T) {
	b := apitest.New([]string{"podnet"}, 1)
	sock := apitest.Serve(t, b)
	log, hook := logtest.NewNullLogger()
	n := installNode(t, sock, log, "bin")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.installWhenReady(ctx) }()
	testutil.WaitFor(t, 10*time.Second, "the failed install logged", func() error {
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.ErrorLevel {
				return nil
			}
		}
		return errors.New("no error logged")
	})
	select {
	case err := <-done:
		t.Fatalf("installWhenReady gave up after a failed install: %v", err)
	default:
	}
	if err := os.Mkdir(n.CNI.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !n.CNI.Installed() {
		t.Error("not installed once the bin dir was there")
	}
}

// TestKeepInstalled: once installed, a conflist or binary removed from the
// node while kurmad runs (another kurma pod's uninstall, a hand) is
// installed again; cancelled, keepInstalled returns.
func TestKeepInstalled(t *testing.T) {
	b := apitest.New([]string{"podnet"}, 1)
	sock := apitest.Serve(t, b)
	n := installNode(t, sock, logrus.New(), "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.keepInstalled(ctx) }()
	installed := func() error {
		if !n.CNI.Installed() || !n.CNI.present() {
			return errors.New("not installed")
		}
		return nil
	}
	testutil.WaitFor(t, 10*time.Second, "the first install", installed)
	for _, p := range []string{n.CNI.conflistPath(), n.CNI.binaryPath()} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "kurma-cni installed again after "+filepath.Base(p)+" was removed", installed)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("keepInstalled after cancel: %v, want context.Canceled", err)
	}
}

// installNode is a Node installing a stand-in kurma-cni binary and the
// conflist of network podnet (served at sock) into a temporary dir, the
// binary into its subdir binSub if given (not made).
func installNode(t *testing.T, sock string, log logrus.FieldLogger, binSub string) *Node {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "kurma-cni-in-image")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Node{Poll: 5 * time.Millisecond, Log: log, API: api.NewClient(sock),
		CNI: CNI{Binary: bin, Conflist: conflist(sock, "podnet"), BinDir: filepath.Join(dir, binSub), ConfDir: dir, ConflistName: "00-kurma.conflist"}}
}

// standInKurmad is a kurmad for Run: it writes its arguments and the
// environment kurma-node gives it to dir/args and dir/env, then exits
// with code, or, with code -1, runs until SIGTERM or SIGUSR2, writes
// which to dir/signal and exits 0.
func standInKurmad(t *testing.T, dir string, code int) string {
	t.Helper()
	// The sleep starts, and the trap that ends it is set, before args is
	// written: the test stops Run only once args is there, so no sleep is
	// left behind (nor would one hold the test's output open).
	trap, run := fmt.Sprintf(`sleep 120 >/dev/null 2>&1 & pid=$!
trap 'echo TERM >%[1]s/signal; kill $pid; exit 0' TERM
trap 'echo USR2 >%[1]s/signal; kill $pid; exit 0' USR2`, dir), `wait $pid`
	if code >= 0 {
		trap, run = "", fmt.Sprintf("exit %d", code)
	}
	// args last: once it is there, the stand-in has written all.
	script := fmt.Sprintf(`#!/bin/sh
%[2]s
env | grep -E '^(KURMA_CREDENTIALS_DIR|REGISTRY_AUTH_FILE)=' | sort >%[1]s/env
echo "$@" >%[1]s/args.tmp && mv %[1]s/args.tmp %[1]s/args
%[3]s
`, dir, trap, run)
	p := filepath.Join(dir, "kurmad")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRun: kurma-node renders kurmad's config for its node, starts kurmad
// on it (with the credentials root in its environment), installs
// kurma-cni once the conflist's networks run, and on SIGTERM (ctx
// cancelled) stops kurmad and returns nil; kurma-cni and the credentials
// stay for the next kurmad, and so do the plugin containers (SIGTERM),
// unless kurma is being uninstalled (SIGUSR2 stops them too). kurmad
// exiting on its own ends Run with an error saying so.
func TestRun(t *testing.T) {
	b := apitest.New([]string{"podnet"}, 1)
	sock := apitest.Serve(t, b)
	const nodePath = "/api/v1/nodes/n1"
	node := map[string]any{"metadata": map[string]any{"name": "n1"}, "spec": map[string]any{"podCIDR": "10.244.1.0/24"}}
	tests := []struct {
		name      string
		code      int // the stand-in's exit code; -1: until SIGTERM
		ds        map[string]any
		want      string // Run's error, "" for nil
		uninstall bool
	}{
		{"stopped, replaced", -1, ds("u1", false), "", false},
		{"stopped, uninstalled", -1, ds("u1", true), "", true},
		{"kurmad fails", 3, ds("u1", false), "kurmad exited: exit status 3", false},
		{"kurmad exits 0 on its own", 0, ds("u1", false), "kurmad exited on its own", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			log, _ := logtest.NewNullLogger()
			n := installNode(t, sock, log, "")
			n.NodeName, n.PodName, n.PodNamespace = "n1", "kurmad-x1", "kurma-system"
			n.Cluster = apiServer(t, map[string]any{nodePath: node, podPath: pod("u1"), dsPath: tt.ds}, nil)
			n.Template, n.Config = filepath.Join(dir, "kurmad.json.tmpl"), filepath.Join(dir, "kurmad.json")
			if err := os.WriteFile(n.Template, []byte(`{"pod_networks":[{"name":"podnet","subnet":"__NODE_POD_CIDR__"}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			n.Kurmad, n.KurmadArgs = standInKurmad(t, dir, tt.code), []string{"--log-level", "debug"}
			n.Credentials = &Credentials{Root: filepath.Join(dir, "credentials")}
			if err := os.Mkdir(n.Credentials.Root, 0o700); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var err error
			ran := make(chan struct{})
			go func() {
				err = n.Run(ctx)
				close(ran)
			}()
			// Run's end, on every way out: its stand-in must not outlive
			// the test's dirs.
			wait := func() {
				select {
				case <-ran:
				case <-time.After(20 * time.Second):
					t.Fatal("Run did not return")
				}
			}
			defer func() {
				cancel()
				wait()
			}()
			if tt.code < 0 {
				testutil.WaitFor(t, 10*time.Second, "kurmad started and kurma-cni installed", func() error {
					if _, err := os.Stat(filepath.Join(dir, "args")); err != nil {
						return err
					}
					if !n.CNI.Installed() {
						return errors.New("kurma-cni not installed")
					}
					return nil
				})
				cancel()
			}
			wait()
			if got := fmt.Sprint(err); tt.want == "" && err != nil || tt.want != "" && got != tt.want {
				t.Errorf("Run: %v, want %q", err, tt.want)
			}
			cfg, _ := os.ReadFile(n.Config)
			if want := `{"pod_networks":[{"name":"podnet","subnet":"10.244.1.0/24"}]}`; string(cfg) != want {
				t.Errorf("kurmad's config %s, want %s", cfg, want)
			}
			args, _ := os.ReadFile(filepath.Join(dir, "args"))
			if want := "--config " + n.Config + " --log-level debug\n"; string(args) != want {
				t.Errorf("kurmad's arguments %q, want %q", args, want)
			}
			env, _ := os.ReadFile(filepath.Join(dir, "env"))
			if want := "KURMA_CREDENTIALS_DIR=" + n.Credentials.Root + "\n"; string(env) != want {
				t.Errorf("kurmad's environment %q, want %q", env, want)
			}
			if tt.code >= 0 {
				return
			}
			sig, _ := os.ReadFile(filepath.Join(dir, "signal"))
			if want := map[bool]string{false: "TERM\n", true: "USR2\n"}[tt.uninstall]; string(sig) != want {
				t.Errorf("kurmad stopped by %q, want %q", sig, want)
			}
			_, rootErr := os.Stat(n.Credentials.Root)
			if tt.uninstall == n.CNI.present() || tt.uninstall == (rootErr == nil) {
				t.Errorf("after the stop: kurma-cni present %v, credentials kept %v (%v); want both %v", n.CNI.present(), rootErr == nil, rootErr, !tt.uninstall)
			}
		})
	}
}
