package k8stest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// testRegistry is Debian's docker-registry (the distribution registry)
// on the cluster's address, TLS with a CA of the test's own and htpasswd
// auth (user kurma, password s3cret).
type testRegistry struct {
	host   string // IP:port
	caFile string
	certs  string // a cert dir for skopeo: ca.crt
}

func startRegistry(t *testing.T, c *Cluster) *testRegistry {
	t.Helper()
	bin := need(t, "/usr/bin/docker-registry", "make k8s-test installs Debian's docker-registry")
	need(t, "/usr/bin/skopeo", "make k8s-test installs skopeo")
	dir := t.TempDir()
	p, err := newPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.issue("registry", "registry", nil, []net.IP{net.ParseIP(c.NodeIP)}, nil); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte("kurma:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := freePort(c.NodeIP)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRegistry{host: net.JoinHostPort(c.NodeIP, fmt.Sprint(port)), caFile: p.path("ca.crt"), certs: filepath.Join(dir, "certs")}
	cfg := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}
http: {addr: %q, tls: {certificate: %s, key: %s}}
auth: {htpasswd: {realm: kurma-test, path: %s}}
`, filepath.Join(dir, "data"), r.host, p.path("registry.crt"), p.path("registry.key"), filepath.Join(dir, "htpasswd"))
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			t.Logf("docker-registry's log:\n%s", tailFile(logf.Name(), 30))
		}
	})
	if err := os.MkdirAll(r.certs, 0o700); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(r.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.certs, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	client := r.client(t)
	client.Timeout = 2 * time.Second
	waitFor(t, 30*time.Second, "docker-registry to answer", func() error {
		resp, err := client.Get("https://" + r.host + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("GET /v2/: %s, want 401 (auth on)", resp.Status)
		}
		return nil
	})
	return r
}

// push copies the OCI layout at layout to repoTag in the registry.
func (r *testRegistry) push(t *testing.T, layout, repoTag string) {
	t.Helper()
	out, err := exec.Command("skopeo", "copy", "--quiet", "--dest-creds", "kurma:s3cret", "--dest-cert-dir", r.certs,
		"oci:"+layout, "docker://"+r.host+"/"+repoTag).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy %s to %s: %v: %s", layout, repoTag, err, out)
	}
}

// trustOn makes the node's kurmad (and kurma-node) trust the registry's
// CA: kurmad's certs.d, in its image store on the node.
func (r *testRegistry) trustOn(t *testing.T, n *Node) {
	t.Helper()
	dir := n.Path("/var/lib/kurma/images/.containers/certs.d/" + r.host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(r.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
}

// pullSecret is a kubernetes.io/dockerconfigjson Secret in kurma-system
// with user kurma and password for the registry.
func (r *testRegistry) pullSecret(name, password string) string {
	auth := base64.StdEncoding.EncodeToString([]byte("kurma:" + password))
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{r.host: map[string]string{"auth": auth}}})
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %s, namespace: kurma-system}
type: kubernetes.io/dockerconfigjson
data: {.dockerconfigjson: %s}
`, name, base64.StdEncoding.EncodeToString(cfg))
}

// regNetwork is a Network on the registry's image, with pull secret
// secret.
func regNetwork(name, image, secret string, mtu int) string {
	return fmt.Sprintf(`apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: %s}
spec:
  image: %s
  imagePullSecret: %s
  config:
    cniVersion: "1.0.0"
    type: bridge
    bridge: kurma3
    mtu: %d
    ipam: {type: host-local, subnet: 172.29.0.0/16}
`, name, image, secret, mtu)
}

// regStatus is a Network's status as the registry step reads it.
type regStatus struct {
	Status struct {
		Resolved *struct{ From, Image string } `json:"resolved"`
		Nodes    []regEntry                    `json:"nodes"`
	} `json:"status"`
}

func getRegStatus(c *Cluster, name string) (*regStatus, error) {
	var s regStatus
	return &s, c.KubectlJSON(context.Background(), &s, "get", "networks.kurma.dev", name)
}

// regEntry is a Network's status entry for a node.
type regEntry = struct {
	Node, State, Reason, Image string
	Generation                 int
}

// waitEveryNode waits until network's status entry of every node passes
// check (which may also read the status), and returns the status.
func waitEveryNode(t *testing.T, c *Cluster, timeout time.Duration, network, what string, check func(st *regStatus, e regEntry) error) *regStatus {
	t.Helper()
	var last *regStatus
	waitFor(t, timeout, network+" "+what+" on every node", func() error {
		st, err := getRegStatus(c, network)
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			i := slices.IndexFunc(st.Status.Nodes, func(e regEntry) bool { return e.Node == n.Name })
			if i < 0 {
				return fmt.Errorf("no entry for %s: %+v", n.Name, st.Status.Nodes)
			}
			if err := check(st, st.Status.Nodes[i]); err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
		last = st
		return nil
	})
	return last
}

// checkRegistryNetworks: a plugin image pushed to a registry (TLS, auth)
// runs on every node as a Network naming it and its pull Secret,
// resolved to the digest the tag had; the tag moved and the object
// edited, the nodes still run that digest; a Network whose Secret has a
// wrong password is reported failed on its status for every node, with
// the registry's 401, while kurma's pods keep running (no crash loop).
func checkRegistryNetworks(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	root := repo(t)
	kurmadBefore := kurmadPodsByNode(t, c)

	s.step("a registry (TLS, auth) holding the plugin image, pushed by the test")
	reg := startRegistry(t, c)
	reg.push(t, filepath.Join(root, "images/out/cni-netplugin"), "kurma/cni-netplugin:v1")
	for _, n := range c.Nodes {
		reg.trustOn(t, n)
	}
	image := "docker://" + reg.host + "/kurma/cni-netplugin:v1"

	s.step("a Network whose pull Secret has a wrong password: failed on its status for every node, not a crash loop")
	applyYAML(t, c, reg.pullSecret("badcred", "wrong"))
	applyYAML(t, c, regNetwork("regnet", image, "badcred", 1500))
	waitEveryNode(t, c, 2*time.Minute, "regnet", "failed with the registry's 401", func(_ *regStatus, e regEntry) error {
		if e.State != "failed" || !strings.Contains(e.Reason, "401") {
			return fmt.Errorf("%+v", e)
		}
		return nil
	})
	if p := kurmadPodsByNode(t, c); !equalMaps(p, kurmadBefore) {
		t.Errorf("kurma's pods %v, were %v", p, kurmadBefore)
	}

	s.step("the right Secret: the image is resolved to its digest and runs on every node")
	applyYAML(t, c, reg.pullSecret("regcred", "s3cret"))
	applyYAML(t, c, regNetwork("regnet", image, "regcred", 1500))
	imageID := ""
	st := waitEveryNode(t, c, 3*time.Minute, "regnet", "running from the registry", func(st *regStatus, e regEntry) error {
		if r := st.Status.Resolved; r == nil || r.From != image || !strings.Contains(r.Image, "@sha256:") {
			return fmt.Errorf("resolved %+v", st.Status.Resolved)
		}
		if e.State != "running" || e.Image == "" || (imageID != "" && e.Image != imageID) {
			return fmt.Errorf("%+v (another node runs %s)", e, imageID)
		}
		imageID = e.Image
		return nil
	})
	resolved := st.Status.Resolved.Image
	t.Logf("regnet: %s resolved to %s, running image %s", image, resolved, imageID)

	s.step("the tag moved, the object edited: every node runs the digest it was resolved to")
	reg.push(t, filepath.Join(root, "images/out/flannel"), "kurma/cni-netplugin:v1")
	applyYAML(t, c, regNetwork("regnet", image, "regcred", 1400))
	waitEveryNode(t, c, 2*time.Minute, "regnet", "generation 2 running", func(st *regStatus, e regEntry) error {
		if e.State != "running" || e.Generation < 2 {
			return fmt.Errorf("%+v", e)
		}
		if e.Image != imageID {
			return fmt.Errorf("generation %d runs image %s, want %s (the digest the tag had)", e.Generation, e.Image, imageID)
		}
		if st.Status.Resolved == nil || st.Status.Resolved.Image != resolved {
			return fmt.Errorf("resolved %+v, want %s still", st.Status.Resolved, resolved)
		}
		return nil
	})
	if p := kurmadPodsByNode(t, c); !equalMaps(p, kurmadBefore) {
		t.Errorf("kurma's pods %v, were %v", p, kurmadBefore)
	}
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "regnet", "--wait=true"); err != nil {
		t.Error(err)
	}
	checkSignedNetwork(t, s, c, reg, "regcred")
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "delete", "secret", "regcred", "badcred"); err != nil {
		t.Error(err)
	}
}
