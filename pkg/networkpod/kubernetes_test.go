package networkpod

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// kubeReport runs hosttool's kubeenv in network's generation 0.
func kubeReport(t *testing.T, p *Host, network, saDir string) map[string]string {
	t.Helper()
	out, stderr, err := p.Exec(context.Background(), testCall(network, 0, "/bin/kubeenv", []string{saDir}, nil))
	if err != nil {
		t.Fatalf("%s: kubeenv: %v\n%s", network, err, stderr)
	}
	var r map[string]string
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: kubeenv printed %q: %v", network, out, err)
	}
	return r
}

// writeCredentials writes network's credentials under root as
// kurma-node does: each file written beside and renamed over the old one,
// in a directory that stays.
func writeCredentials(t *testing.T, root, network, token string) {
	t.Helper()
	dir := netplugin.CredentialsDir(root, network)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{netplugin.TokenFile: token, netplugin.CAFile: "-----BEGIN CERTIFICATE-----\n", netplugin.NamespaceFile: "kurma-system"} {
		tmp := filepath.Join(dir, "."+f+".new")
		if err := os.WriteFile(tmp, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKubernetesCredentials: each network with kubernetes_credentials
// gets its own credentials directory read-only at the in-cluster path (a
// token renamed into it shows through, in the running container), the
// API server's address and the node's name, in its main and in its
// calls; another network's token is not in reach; a network without it,
// on the same host, sees none of them, wherever a plugin would look (its
// environment, its main's, the in-cluster path, its mounts).
func TestKubernetesCredentials(t *testing.T) {
	root := t.TempDir()
	writeCredentials(t, root, "ktkube", "kt-token-1")
	writeCredentials(t, root, "ktkube2", "kt-other-token")
	p := newTestHost(t, func(o *Options) {
		o.Kubernetes = &Kubernetes{CredentialsDir: root, Host: "10.96.0.1", Port: "443", NodeName: "ktnode1"}
	})
	startGenerations(t, p,
		Spec{Network: "ktkube", Image: toolImage(t, "main"), KubernetesCredentials: true},
		Spec{Network: "ktkube2", Image: toolImage(t, "main"), KubernetesCredentials: true},
		Spec{Network: "ktnokube", Image: toolImage(t, "main")},
	)
	const env = "KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 NODE_NAME=ktnode1"
	got := kubeReport(t, p, "ktkube", root)
	for k, want := range map[string]string{
		"env": env, "main env": env, "token": "kt-token-1",
		"write token": "EROFS", "plant in the service account dir": "EROFS",
	} {
		if got[k] != want {
			t.Errorf("ktkube: %s: %q, want %q", k, got[k], want)
		}
	}
	if got := kubeReport(t, p, "ktkube2", root); got["token"] != "kt-other-token" {
		t.Errorf("ktkube2 reads the token %q, want its own", got["token"])
	}
	writeCredentials(t, root, "ktkube", "kt-token-2")
	if got := kubeReport(t, p, "ktkube", root); got["token"] != "kt-token-2" {
		t.Errorf("ktkube after the token's rotation reads %q, want kt-token-2", got["token"])
	}

	got = kubeReport(t, p, "ktnokube", root)
	for k, want := range map[string]string{
		"env": "", "main env": "", "token": "ENOENT", "write token": "ENOENT", "plant in the service account dir": "ENOENT",
		"mounts of the service account": "0",
	} {
		if got[k] != want {
			t.Errorf("ktnokube (no kubernetes_credentials): %s: %q, want %q", k, got[k], want)
		}
	}
}

// TestKubernetesCredentialsMissing: a network that asks for credentials
// when kurmad runs outside Kubernetes, or whose token kurma-node could not
// get, fails to start, saying why (naming its ServiceAccount and
// kurma-node's reason); once the token is there it starts.
func TestKubernetesCredentialsMissing(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "ktkube", Image: toolImage(t, "main"), KubernetesCredentials: true})
	testutil.WaitFor(t, 20*time.Second, "ktkube failed", statusWhere(p, "ktkube", func(s Status) bool {
		return s.State == StateFailed && strings.Contains(s.Reason, "kubernetes_credentials") && strings.Contains(s.Reason, "KUBERNETES_SERVICE_HOST")
	}))
	if _, _, err := p.Exec(context.Background(), testCall("ktkube", 0, "/bin/echo", nil, nil)); err == nil {
		t.Error("a call ran in a network whose container could not start")
	}
	if err := (*Kubernetes)(nil).check("ktkube"); !errors.Is(err, ErrNoKubernetes) {
		t.Errorf("check without credentials: %v, want ErrNoKubernetes", err)
	}

	root := t.TempDir()
	problem := netplugin.CredentialsProblem(root, "ktsa")
	if err := os.MkdirAll(filepath.Dir(problem), 0o700); err != nil {
		t.Fatal(err)
	}
	const why = `TokenRequest in namespace kurma-system: 404 serviceaccounts "kurma-net-ktsa" not found`
	if err := os.WriteFile(problem, []byte(why+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p2 := newTestHost(t, func(o *Options) {
		o.Kubernetes = &Kubernetes{CredentialsDir: root, Host: "10.96.0.1", Port: "443", NodeName: "ktnode1"}
		o.RestartBase = time.Hour // only RetryNow starts it again
	})
	startGenerations(t, p2, Spec{Network: "ktsa", Image: toolImage(t, "main"), KubernetesCredentials: true})
	testutil.WaitFor(t, 20*time.Second, "ktsa failed naming its ServiceAccount", statusWhere(p2, "ktsa", func(s Status) bool {
		return s.State == StateFailed && strings.Contains(s.Reason, "ServiceAccount kurma-net-ktsa") && strings.Contains(s.Reason, why)
	}))
	writeCredentials(t, root, "ktsa", "kt-sa-token")
	if !p2.RetryNow("ktsa", 0) {
		t.Fatal("RetryNow: ktsa was not waiting")
	}
	testutil.WaitFor(t, 20*time.Second, "ktsa running with its token", statusWhere(p2, "ktsa", func(s Status) bool { return s.State == StateRunning }))
	if got := kubeReport(t, p2, "ktsa", root); got["token"] != "kt-sa-token" {
		t.Errorf("ktsa reads %q, want its token", got["token"])
	}
}
