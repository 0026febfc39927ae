package k8stest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"
)

// sigstoreKey is a sigstore (cosign) key pair made for the test: the
// private key encrypted with passphrase file pass, as skopeo's
// --sign-by-sigstore-private-key reads it (cosign's format: PKCS#8,
// scrypt and NaCl secretbox, in go-securesystemslib's JSON), and the
// public key's PEM, as a policy's sigstoreSigned keyData holds it.
type sigstoreKey struct {
	private, pass string
	public        []byte
}

func newSigstoreKey(t *testing.T, dir, name string) sigstoreKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pass := []byte("kurma-test")
	salt, nonce := make([]byte, 32), make([]byte, 24)
	if _, err := rand.Read(salt); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	const n, r, p = 32768, 8, 1 // go-securesystemslib's "legacy" parameters, which every reader takes
	key, err := scrypt.Key(pass, salt, n, r, p, 32)
	if err != nil {
		t.Fatal(err)
	}
	var kb [32]byte
	var nb [24]byte
	copy(kb[:], key)
	copy(nb[:], nonce)
	enc, err := json.Marshal(map[string]any{
		"kdf":        map[string]any{"name": "scrypt", "params": map[string]int{"N": n, "r": r, "p": p}, "salt": salt},
		"cipher":     map[string]any{"name": "nacl/secretbox", "nonce": nonce},
		"ciphertext": secretbox.Seal(nil, der, &nb, &kb),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := sigstoreKey{private: filepath.Join(dir, name+".key"), pass: filepath.Join(dir, name+".pass"),
		public: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})}
	if err := os.WriteFile(s.private, pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED COSIGN PRIVATE KEY", Bytes: enc}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.pass, pass, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// pushSigned copies the OCI layout at layout to repoTag in the registry
// and signs it with key: a sigstore signature stored beside the image in
// the registry (an attachment, the sha256-<digest>.sig tag cosign uses),
// where the shipped manifest's registries.yaml has kurmad look.
func (r *testRegistry) pushSigned(t *testing.T, layout, repoTag string, key sigstoreKey) {
	t.Helper()
	regd := t.TempDir()
	conf := fmt.Sprintf("docker:\n  %s:\n    use-sigstore-attachments: true\n", r.host)
	if err := os.WriteFile(filepath.Join(regd, "kurma-test.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("skopeo", "--registries.d", regd, "copy", "--quiet", "--dest-creds", "kurma:s3cret", "--dest-cert-dir", r.certs,
		"--sign-by-sigstore-private-key", key.private, "--sign-passphrase-file", key.pass,
		"oci:"+layout, "docker://"+r.host+"/"+repoTag).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy --sign-by-sigstore-private-key %s to %s: %v: %s", layout, repoTag, err, out)
	}
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
	keys := t.TempDir()
	good, wrong := newSigstoreKey(t, keys, "good"), newSigstoreKey(t, keys, "wrong")
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
