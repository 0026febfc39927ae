package k8stest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sigstoreKey is a key pair of the test's, as sigstore (cosign) signs
// with: ECDSA P-256; public is the public key's PEM, as a policy's
// sigstoreSigned keyData holds it.
type sigstoreKey struct {
	private *ecdsa.PrivateKey
	public  []byte
}

func newSigstoreKey(t *testing.T) sigstoreKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return sigstoreKey{private: k, public: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})}
}

// pushSigned copies the OCI layout at layout to repoTag in the registry
// and signs it with key as cosign does: a sigstore signature (the
// payload naming the repository and the manifest's digest, its ECDSA
// signature in the layer's annotation) stored beside the image, as the
// OCI image tagged sha256-<digest>.sig in the same repository, where the
// shipped manifest's registries.yaml has kurmad look. (Debian's skopeo
// is built without sigstore signing, so the test writes it.)
func (r *testRegistry) pushSigned(t *testing.T, layout, repoTag string, key sigstoreKey) {
	t.Helper()
	digestFile := filepath.Join(t.TempDir(), "digest")
	out, err := exec.Command("skopeo", "copy", "--quiet", "--dest-creds", "kurma:s3cret", "--dest-cert-dir", r.certs,
		"--digestfile", digestFile, "oci:"+layout, "docker://"+r.host+"/"+repoTag).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy %s to %s: %v: %s", layout, repoTag, err, out)
	}
	d, err := os.ReadFile(digestFile)
	if err != nil {
		t.Fatal(err)
	}
	manifestDigest := strings.TrimSpace(string(d))
	repoName, _, _ := strings.Cut(repoTag, ":")
	payload, err := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": r.host + "/" + repoName},
			"image":    map[string]string{"docker-manifest-digest": manifestDigest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key.private, h[:])
	if err != nil {
		t.Fatal(err)
	}
	config := []byte("{}")
	desc := func(mediaType string, b []byte) map[string]any {
		return map[string]any{"mediaType": mediaType, "digest": fmt.Sprintf("sha256:%x", sha256.Sum256(b)), "size": len(b)}
	}
	layer := desc("application/vnd.dev.cosign.simplesigning.v1+json", payload)
	layer["annotations"] = map[string]string{"dev.cosignproject.cosign/signature": base64.StdEncoding.EncodeToString(sig)}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc("application/vnd.oci.image.config.v1+json", config), "layers": []any{layer},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := r.client(t)
	base := "https://" + r.host + "/v2/" + repoName
	for _, b := range [][]byte{config, payload} {
		loc := r.do(t, client, http.MethodPost, base+"/blobs/uploads/", "", nil, http.StatusAccepted).Header.Get("Location")
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		if u, err = u.Parse(loc); err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("digest", fmt.Sprintf("sha256:%x", sha256.Sum256(b)))
		u.RawQuery = q.Encode()
		r.do(t, client, http.MethodPut, u.String(), "application/octet-stream", b, http.StatusCreated)
	}
	tag := strings.Replace(manifestDigest, ":", "-", 1) + ".sig"
	r.do(t, client, http.MethodPut, base+"/manifests/"+tag, "application/vnd.oci.image.manifest.v1+json", manifest, http.StatusCreated)
}

// client is an HTTP client trusting the registry's CA.
func (r *testRegistry) client(t *testing.T) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(r.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// do sends a request to the registry as user kurma and fails the test
// unless it answers want.
func (r *testRegistry) do(t *testing.T, client *http.Client, method, u, contentType string, body []byte, want int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("kurma", "s3cret")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d: %s", method, u, resp.Status, want, msg)
	}
	return resp
}

// trustPolicy is a containers-policy.json accepting the docker images of
// repo signed by key (sigstoreSigned, the key inline) and rejecting
// everything else, in a Secret of kurma-system under key policy.json.
func trustPolicy(secret, repo string, key sigstoreKey) string {
	policy, _ := json.Marshal(map[string]any{
		"default": []any{map[string]string{"type": "reject"}},
		"transports": map[string]any{"docker": map[string]any{repo: []any{map[string]any{
			"type": "sigstoreSigned", "keyData": base64.StdEncoding.EncodeToString(key.public),
			"signedIdentity": map[string]string{"type": "matchRepository"}}}}},
	})
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %s, namespace: kurma-system}
data: {policy.json: %s}
`, secret, base64.StdEncoding.EncodeToString(policy))
}

// signedNetwork is a Network on image whose trust is the policy in
// Secret trustSecret.
func signedNetwork(image, pullSecret, trustSecret string) string {
	return fmt.Sprintf(`apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: signednet}
spec:
  image: %s
  imagePullSecret: %s
  trust:
    kind: policy
    secretRef: {name: %s, key: policy.json}
  config:
    cniVersion: "1.0.0"
    type: bridge
    bridge: kurma4
    ipam: {type: host-local, subnet: 172.28.0.0/16}
`, image, pullSecret, trustSecret)
}

// signedEntries waits for signednet's entry of every node to be in
// state with a reason holding every one of want (lower case), and
// returns the first node's reason.
func signedEntries(t *testing.T, c *Cluster, state string, timeout time.Duration, want ...string) string {
	t.Helper()
	st := waitEveryNode(t, c, timeout, "signednet", fmt.Sprintf("%s, reason naming %q", state, want), func(_ *regStatus, e regEntry) error {
		if e.State != state {
			return fmt.Errorf("state %q: %s", e.State, e.Reason)
		}
		for _, w := range want {
			if !strings.Contains(strings.ToLower(e.Reason), w) {
				return fmt.Errorf("state %q: reason %q does not name %q", e.State, e.Reason, w)
			}
		}
		return nil
	})
	return st.Status.Nodes[0].Reason
}

// kurmaRestarts is the restart count of kurma's containers on every node.
func kurmaRestarts(t *testing.T, c *Cluster) int {
	t.Helper()
	var list struct {
		Items []struct {
			Status struct {
				ContainerStatuses []struct{ RestartCount int } `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.KubectlJSON(context.Background(), &list, "-n", "kurma-system", "get", "pods", "-l", "app=kurmad"); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range list.Items {
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
		}
	}
	return n
}

// checkSignedNetwork: a plugin image pushed signed (sigstore, stored in
// the registry) runs as a Network whose spec.trust is a policy in a
// Secret naming the key; with the Secret missing, and with it naming
// another key, the Network is failed on its status for the node with a
// reason naming the Secret or the signature, while kurma's pod runs on
// unrestarted; the Secret fixed, the network runs, without touching the
// Network (kurma-node watches the Secrets its Networks name).
func checkSignedNetwork(t *testing.T, s *stepper, c *Cluster, reg *testRegistry, pullSecret string) {
	ctx := context.Background()
	kurmadBefore, restartsBefore := kurmadPodsByNode(t, c), kurmaRestarts(t, c)
	good, wrong := newSigstoreKey(t), newSigstoreKey(t)
	signedRepo := reg.host + "/kurma/signed"

	s.step("a plugin image pushed signed (sigstore, in the registry); its Network's trust Secret missing: failed, naming it")
	reg.pushSigned(t, filepath.Join(repo(t), "images/out/cni-netplugin"), "kurma/signed:v1", good)
	image := "docker://" + signedRepo + ":v1"
	applyYAML(t, c, signedNetwork(image, pullSecret, "net-trust"))
	signedEntries(t, c, "failed", 2*time.Minute, "spec.trust: secret kurma-system/net-trust", "no such secret")

	s.step("the trust Secret names another key: failed, naming the signature")
	applyYAML(t, c, trustPolicy("net-trust", signedRepo, wrong))
	reason := signedEntries(t, c, "failed", 2*time.Minute, "signature")
	t.Logf("signednet with the wrong key: %s", reason)

	s.step("the Secret fixed (the right key), the Network untouched: it runs")
	fixed := time.Now()
	applyYAML(t, c, trustPolicy("net-trust", signedRepo, good))
	signedEntries(t, c, "running", 2*time.Minute)
	t.Logf("signednet running on every node %.1fs after its trust Secret was fixed", time.Since(fixed).Seconds())
	if p, r := kurmadPodsByNode(t, c), kurmaRestarts(t, c); !equalMaps(p, kurmadBefore) || r != restartsBefore {
		t.Errorf("kurma's pods %v with %d restarts, were %v with %d: a bad trust must not restart them", p, r, kurmadBefore, restartsBefore)
	}
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "signednet", "--wait=true"); err != nil {
		t.Error(err)
	}
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "delete", "secret", "net-trust"); err != nil {
		t.Error(err)
	}
}
