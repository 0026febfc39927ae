package k8snode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// tokenAPI is a real HTTPS server answering the TokenRequest endpoint as
// the API server does: a token per request for the ServiceAccounts it
// has, each expiring after life; 404 for the others, 403 for those
// forbidden.
type tokenAPI struct {
	srv *httptest.Server

	mu        sync.Mutex
	accounts  map[string]bool // namespace/name
	forbidden map[string]bool
	life      time.Duration
	issued    map[string]int // tokens issued, by account
	bodies    []map[string]any
	bearers   []string
}

func newTokenAPI(t *testing.T) *tokenAPI {
	a := &tokenAPI{accounts: map[string]bool{}, forbidden: map[string]bool{}, issued: map[string]int{}, life: time.Hour}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *tokenAPI) serve(w http.ResponseWriter, r *http.Request) {
	var ns, sa string
	if _, err := fmt.Sscanf(strings.ReplaceAll(r.URL.Path, "/", " "), " api v1 namespaces %s serviceaccounts %s token", &ns, &sa); err != nil || r.Method != http.MethodPost {
		http.Error(w, `{"kind":"Status","code":404,"reason":"NotFound","message":"the server could not find the requested resource"}`, http.StatusNotFound)
		return
	}
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bodies = append(a.bodies, body)
	a.bearers = append(a.bearers, r.Header.Get("Authorization"))
	key := ns + "/" + sa
	w.Header().Set("Content-Type", "application/json")
	switch {
	case a.forbidden[key]:
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","code":403,"reason":"Forbidden","message":"serviceaccounts \"%s\" is forbidden: User \"system:serviceaccount:kurma-system:kurmad\" cannot create resource \"serviceaccounts/token\""}`, sa)
	case !a.accounts[key]:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","code":404,"reason":"NotFound","message":"serviceaccounts \"%s\" not found"}`, sa)
	default:
		a.issued[key]++
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
			"status": map[string]any{"token": fmt.Sprintf("%s-token-%d", sa, a.issued[key]),
				"expirationTimestamp": time.Now().Add(a.life).UTC().Format(time.RFC3339Nano)}})
	}
}

func (a *tokenAPI) set(fn func(a *tokenAPI)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn(a)
}

// credentials is a Credentials on a (root under dir), kurma-node's own
// token in a file of its own, and kurmad the apitest backend b.
func testCredentials(t *testing.T, a *tokenAPI, b *apitest.Backend) *Credentials {
	t.Helper()
	dir := t.TempDir()
	own := filepath.Join(dir, "kurma-node-token")
	if err := os.WriteFile(own, []byte("kurma-node's own token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(testutil.LogWriter(t))
	c := &Credentials{
		Cluster:   &Cluster{Server: a.srv.URL, TokenFile: own, HTTP: a.srv.Client()},
		Namespace: "kurma-system", Root: filepath.Join(dir, "credentials"), CA: []byte("-----BEGIN CERTIFICATE-----\nkt\n"),
		Log: log,
	}
	if b != nil {
		c.Kurmad = api.NewClient(apitest.Serve(t, b))
	}
	t.Cleanup(c.Close)
	return c
}

func readCred(t *testing.T, root, network, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(netplugin.CredentialsDir(root, network), file))
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// TestCredentialsWritten: Sync writes, before it returns, each
// credentialed network's own token (asked with kurma-node's token, for an
// hour, for the API server's audience), the cluster's CA and kurma's
// namespace into the network's directory; a network without its
// ServiceAccount, one kurma-node may not ask for, and one whose name
// makes no ServiceAccount name get no token and their problem says why,
// naming the ServiceAccount.
func TestCredentialsWritten(t *testing.T) {
	a := newTokenAPI(t)
	a.set(func(a *tokenAPI) {
		a.accounts["kurma-system/kurma-net-podnet"] = true
		a.accounts["kurma-system/kurma-net-netpol"] = true
		a.forbidden["kurma-system/kurma-net-locked"] = true
	})
	c := testCredentials(t, a, nil)
	c.Sync(context.Background(), []string{"podnet", "netpol", "nosa", "locked", "Bad_Name"})
	for _, n := range []string{"podnet", "netpol"} {
		if got := readCred(t, c.Root, n, "token"); got != "kurma-net-"+n+"-token-1" {
			t.Errorf("%s's token %q, want its own ServiceAccount's", n, got)
		}
		if got := readCred(t, c.Root, n, "ca.crt"); got != string(c.CA) {
			t.Errorf("%s's ca.crt %q", n, got)
		}
		if got := readCred(t, c.Root, n, "namespace"); got != "kurma-system" {
			t.Errorf("%s's namespace %q", n, got)
		}
		if _, err := os.Stat(netplugin.CredentialsProblem(c.Root, n)); err == nil {
			t.Errorf("%s has a problem file beside its token", n)
		}
	}
	a.set(func(a *tokenAPI) {
		for i, b := range a.bodies {
			spec, _ := b["spec"].(map[string]any)
			if b["kind"] != "TokenRequest" || spec["expirationSeconds"] != float64(3600) || spec["audiences"] != nil {
				t.Errorf("request %d: %v, want a TokenRequest of 3600 s for the API server's audience", i, b)
			}
		}
		for _, h := range a.bearers {
			if h != "Bearer kurma-node's own token" {
				t.Errorf("asked with %q, want kurma-node's own token", h)
			}
		}
	})
	for n, want := range map[string]string{
		"nosa":     `ServiceAccount kurma-system/kurma-net-nosa: TokenRequest: POST /api/v1/namespaces/kurma-system/serviceaccounts/kurma-net-nosa/token: 404 serviceaccounts "kurma-net-nosa" not found: create ServiceAccount kurma-net-nosa in namespace kurma-system`,
		"locked":   `ServiceAccount kurma-system/kurma-net-locked: TokenRequest: POST /api/v1/namespaces/kurma-system/serviceaccounts/kurma-net-locked/token: 403 serviceaccounts "kurma-net-locked" is forbidden`,
		"Bad_Name": `ServiceAccount kurma-net-Bad_Name: the network's name makes no valid ServiceAccount name`,
	} {
		b, err := os.ReadFile(netplugin.CredentialsProblem(c.Root, n))
		if err != nil || !strings.HasPrefix(string(b), want) {
			t.Errorf("%s's problem %q (%v), want it to start %q", n, b, err, want)
		}
		if got := readCred(t, c.Root, n, "token"); !strings.HasPrefix(got, "error: ") {
			t.Errorf("%s has a token %q", n, got)
		}
	}
	if b, _ := os.ReadFile(netplugin.CredentialsProblem(c.Root, "locked")); !strings.Contains(string(b), "grant its ServiceAccount create on serviceaccounts/token for kurma-net-locked") {
		t.Errorf("locked's problem gives no hint: %s", b)
	}
	if fi, err := os.Stat(c.Root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("credentials root %v (%v), want 0700: the tokens are the networks' alone", fi.Mode(), err)
	}
}

// TestCredentialsRotated: each token is replaced at 80% of its life,
// renamed into the directory, which a bind mount of it (as kurmad makes
// one in the network's container) shows at once: the same mount, a new
// token.
func TestCredentialsRotated(t *testing.T) {
	testutil.RequireRoot(t)
	a := newTokenAPI(t)
	a.set(func(a *tokenAPI) {
		a.accounts["kurma-system/kurma-net-podnet"] = true
		a.life = 2 * time.Second // renewed after 1.6 s
	})
	c := testCredentials(t, a, nil)
	c.Sync(context.Background(), []string{"podnet"})
	mnt := t.TempDir()
	if err := unix.Mount(netplugin.CredentialsDir(c.Root, "podnet"), mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	read := func() string { b, _ := os.ReadFile(filepath.Join(mnt, "token")); return string(b) }
	if got := read(); got != "kurma-net-podnet-token-1" {
		t.Fatalf("through the mount: %q", got)
	}
	start := time.Now()
	testutil.WaitFor(t, 10*time.Second, "the token to be renewed, through the mount", func() error {
		if got := read(); got != "kurma-net-podnet-token-2" {
			return fmt.Errorf("token %q", got)
		}
		return nil
	})
	if d := time.Since(start); d < time.Second {
		t.Errorf("renewed after %s, want at 80%% of its 2 s life", d)
	}
	testutil.WaitFor(t, 10*time.Second, "a third token", func() error {
		if got := read(); got != "kurma-net-podnet-token-3" {
			return fmt.Errorf("token %q", got)
		}
		return nil
	})
	// Refresh makes it sooner.
	a.set(func(a *tokenAPI) { a.life = time.Hour })
	c2 := testCredentials(t, a, nil)
	c2.Refresh = 300 * time.Millisecond
	c2.Sync(context.Background(), []string{"podnet"})
	first := readCred(t, c2.Root, "podnet", "token")
	testutil.WaitFor(t, 10*time.Second, "a token renewed by Refresh", func() error {
		if got := readCred(t, c2.Root, "podnet", "token"); got == first {
			return fmt.Errorf("token %q", got)
		}
		return nil
	})
}

// TestCredentialsRecover: a network whose ServiceAccount appears later
// gets its token on the next try, its problem goes and kurmad is asked to
// retry the network (whose start waited for the token); a token that
// expired and cannot be renewed is removed; a network that left the config
// and that kurmad no longer runs loses its directory.
func TestCredentialsRecover(t *testing.T) {
	a := newTokenAPI(t)
	b := apitest.New([]string{"podnet", "late"}, 1)
	var mu sync.Mutex
	var retried []string
	b.Hook = func(method, arg string) error {
		if method == "RetryNetwork" {
			mu.Lock()
			retried = append(retried, arg)
			mu.Unlock()
		}
		return nil
	}
	a.set(func(a *tokenAPI) { a.accounts["kurma-system/kurma-net-podnet"] = true })
	c := testCredentials(t, a, b)
	c.Sync(context.Background(), []string{"podnet", "late"})
	if _, err := os.Stat(netplugin.CredentialsProblem(c.Root, "late")); err != nil {
		t.Fatalf("late has no problem: %v", err)
	}
	a.set(func(a *tokenAPI) { a.accounts["kurma-system/kurma-net-late"] = true })
	testutil.WaitFor(t, 10*time.Second, "late's token once its ServiceAccount exists", func() error {
		if got := readCred(t, c.Root, "late", "token"); got != "kurma-net-late-token-1" {
			return fmt.Errorf("token %q", got)
		}
		return nil
	})
	if _, err := os.Stat(netplugin.CredentialsProblem(c.Root, "late")); err == nil {
		t.Error("late's problem stayed")
	}
	testutil.WaitFor(t, 5*time.Second, "kurmad asked to retry late", func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(retried, []string{"late"}) {
			return fmt.Errorf("retried %v", retried)
		}
		return nil
	})

	// Tokens that live a second, then the ServiceAccount goes: once the
	// last token expired, it is removed.
	a.set(func(a *tokenAPI) { a.life = time.Second })
	c2 := testCredentials(t, a, nil)
	c2.Sync(context.Background(), []string{"podnet"})
	a.set(func(a *tokenAPI) { delete(a.accounts, "kurma-system/kurma-net-podnet") })
	testutil.WaitFor(t, 10*time.Second, "the expired token removed", func() error {
		if got := readCred(t, c2.Root, "podnet", "token"); !strings.HasPrefix(got, "error: ") {
			return fmt.Errorf("token %q", got)
		}
		return nil
	})
	if b, err := os.ReadFile(netplugin.CredentialsProblem(c2.Root, "podnet")); err != nil || !strings.Contains(string(b), "404") {
		t.Errorf("podnet's problem after its ServiceAccount went: %q (%v)", b, err)
	}

	// "late" leaves the config while kurmad runs it: kept; "gone", which
	// kurmad does not run, goes at once.
	a.set(func(a *tokenAPI) {
		a.accounts["kurma-system/kurma-net-gone"] = true
		a.accounts["kurma-system/kurma-net-podnet"] = true
	})
	c.Sync(context.Background(), []string{"podnet", "late", "gone"})
	if got := readCred(t, c.Root, "gone", "token"); got != "kurma-net-gone-token-1" {
		t.Fatalf("gone's token %q", got)
	}
	c.Sync(context.Background(), []string{"podnet"})
	testutil.WaitFor(t, 5*time.Second, "gone's credentials removed", func() error {
		if _, err := os.Stat(netplugin.CredentialsDir(c.Root, "gone")); err == nil {
			return fmt.Errorf("%s is still there", netplugin.CredentialsDir(c.Root, "gone"))
		}
		return nil
	})
	if got := readCred(t, c.Root, "late", "token"); got != "kurma-net-late-token-1" {
		t.Errorf("late, which kurmad still runs, lost its token: %q", got)
	}
}

// TestCredentialedNetworks: the networks of a config that ask for
// credentials, under either spelling of pod_networks.
func TestCredentialedNetworks(t *testing.T) {
	got, err := CredentialedNetworks([]byte(`{"pod_networks": [{"name": "b", "kubernetes_credentials": true}, {"name": "c"},
		{"name": "a", "kubernetes_credentials": true}, {"name": "d", "kubernetes_credentials": false}]}`))
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("CredentialedNetworks = %v, %v", got, err)
	}
	if got, _ := CredentialedNetworks([]byte(`{"podNetworks": [{"name": "x", "kubernetes_credentials": true}]}`)); !slices.Equal(got, []string{"x"}) {
		t.Errorf("podNetworks: %v", got)
	}
	if _, err := CredentialedNetworks([]byte(`{`)); err == nil {
		t.Error("a config that is no JSON: no error")
	}
}
