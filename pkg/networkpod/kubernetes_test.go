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
)

// kubeReport runs hosttool's kubeenv in network's generation 0.
func kubeReport(t *testing.T, p *Host, network, saDir string) map[string]string {
	t.Helper()
	out, stderr, err := p.Exec(context.Background(), network, 0, "/bin/kubeenv", []string{saDir}, nil)
	if err != nil {
		t.Fatalf("%s: kubeenv: %v\n%s", network, err, stderr)
	}
	var r map[string]string
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: kubeenv printed %q: %v", network, out, err)
	}
	return r
}

// fakeServiceAccount is a service account dir as the kubelet mounts one:
// the files behind a ..data link swapped on each rotation.
func fakeServiceAccount(t *testing.T, token string) string {
	t.Helper()
	dir := t.TempDir()
	rotateToken(t, dir, token)
	for _, f := range []string{"token", "ca.crt", "namespace"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// rotateToken writes a new token, CA and namespace and swaps ..data to
// them, as the kubelet does.
func rotateToken(t *testing.T, dir, token string) {
	t.Helper()
	data, err := os.MkdirTemp(dir, "..data-")
	if err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"token": token, "ca.crt": "-----BEGIN CERTIFICATE-----\n", "namespace": "kurma-system"} {
		if err := os.WriteFile(filepath.Join(data, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesCredentials: the network with kubernetes_credentials gets
// kurmad's service account read-only at the in-cluster path (a rotated
// token shows through), the API server's address and the node's name, in
// its main and in its calls; a network without it, on the same host, sees
// none of them, wherever a plugin would look (its environment, its main's,
// the in-cluster path, its mounts).
func TestKubernetesCredentials(t *testing.T) {
	sa := fakeServiceAccount(t, "kt-token-1")
	p := newTestHost(t, func(o *Options) {
		o.Kubernetes = &Kubernetes{ServiceAccountDir: sa, Host: "10.96.0.1", Port: "443", NodeName: "ktnode1"}
	})
	startGenerations(t, p,
		Spec{Network: "ktkube", Image: toolImage(t, "main"), KubernetesCredentials: true},
		Spec{Network: "ktnokube", Image: toolImage(t, "main")},
	)
	const env = "KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 NODE_NAME=ktnode1"
	got := kubeReport(t, p, "ktkube", sa)
	for k, want := range map[string]string{
		"env": env, "main env": env, "token": "kt-token-1",
		"write token": "EROFS", "plant in the service account dir": "EROFS",
	} {
		if got[k] != want {
			t.Errorf("ktkube: %s: %q, want %q", k, got[k], want)
		}
	}
	rotateToken(t, sa, "kt-token-2")
	if got := kubeReport(t, p, "ktkube", sa); got["token"] != "kt-token-2" {
		t.Errorf("ktkube after the token's rotation reads %q, want kt-token-2", got["token"])
	}

	got = kubeReport(t, p, "ktnokube", sa)
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
// kurmad does not have (not in a pod) fails to start, saying why.
func TestKubernetesCredentialsMissing(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "ktkube", Image: toolImage(t, "main"), KubernetesCredentials: true})
	testutil.WaitFor(t, 20*time.Second, "ktkube failed", statusWhere(p, "ktkube", func(s Status) bool {
		return s.State == StateFailed && strings.Contains(s.Reason, "kubernetes_credentials") && strings.Contains(s.Reason, "KUBERNETES_SERVICE_HOST")
	}))
	if _, _, err := p.Exec(context.Background(), "ktkube", 0, "/bin/echo", nil, nil); err == nil {
		t.Error("a call ran in a network whose container could not start")
	}
	if err := (*Kubernetes)(nil).check(); !errors.Is(err, ErrNoKubernetes) {
		t.Errorf("check without credentials: %v, want ErrNoKubernetes", err)
	}
}
