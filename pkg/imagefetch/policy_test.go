package imagefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/containers/image/v5/signature"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kurma-project/kurma/internal/testutil"
)

// pgpMechanism signs simple-signing payloads with an in-memory key: the
// containers_image_openpgp build of containers/image can verify but not
// sign, and the signature format is its own (SignDockerManifest).
type pgpMechanism struct{ key *openpgp.Entity }

func (m pgpMechanism) Close() error           { return nil }
func (m pgpMechanism) SupportsSigning() error { return nil }
func (m pgpMechanism) Sign(input []byte, _ string) ([]byte, error) {
	var buf bytes.Buffer
	w, err := openpgp.Sign(&buf, m.key, nil, nil)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(input); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
func (m pgpMechanism) Verify([]byte) ([]byte, string, error) {
	return nil, "", errors.New("not a verifier")
}
func (m pgpMechanism) UntrustedSignatureContents([]byte) ([]byte, string, error) {
	return nil, "", errors.New("not a verifier")
}

// policyEnv is a registry, a lookaside directory for its signatures (as
// podman's registries.d configures one), and the keys.
type policyEnv struct {
	reg          *testRegistry
	sigstore     string // lookaside root
	registriesD  string
	good, wrong  *openpgp.Entity
	goodKeyFile  string
	policyDir    string
	signedByGood string // a policy.json: docker images under <host>/kurma signed by good, everything else rejected
}

func newPolicyEnv(t *testing.T) *policyEnv {
	e := &policyEnv{reg: newTestRegistry(t)}
	keys := t.TempDir()
	e.good, e.goodKeyFile = testutil.SigningKey(t, keys, "good")
	e.wrong, _ = testutil.SigningKey(t, keys, "wrong")
	e.sigstore = t.TempDir()
	e.registriesD = t.TempDir()
	writeFile(t, e.registriesD, "test.yaml", []byte(fmt.Sprintf("docker:\n  %s:\n    lookaside: file://%s\n", e.reg.host, e.sigstore)))
	e.policyDir = t.TempDir()
	e.signedByGood = e.policy(t, "signed.json", fmt.Sprintf(`{"default": [{"type": "reject"}], "transports": {"docker": {
		"%s/kurma": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": %q}]}}}`, e.reg.host, e.goodKeyFile))
	return e
}

func (e *policyEnv) policy(t *testing.T, name, body string) string {
	return writeFile(t, e.policyDir, name, []byte(body))
}

// push pushes img as repoTag and, when by is not nil, stores a simple
// signing signature of its manifest for that reference in the lookaside.
func (e *policyEnv) push(t *testing.T, repoTag string, img v1.Image, by *openpgp.Entity) string {
	t.Helper()
	d := e.reg.push(t, repoTag, img)
	if by != nil {
		m, err := img.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		sig, err := signature.SignDockerManifest(m, e.reg.host+"/"+repoTag, pgpMechanism{by}, "")
		if err != nil {
			t.Fatal(err)
		}
		repo, _, _ := strings.Cut(repoTag, ":")
		dir := filepath.Join(e.sigstore, repo+"@sha256="+d.Hex)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, "signature-1", sig)
	}
	return "docker://" + e.reg.host + "/" + repoTag
}

func (e *policyEnv) fetcher(t *testing.T, policy string) *Fetcher {
	return newTestFetcher(t, Options{InsecureRegistries: []string{e.reg.host}, SignaturePolicy: policy, RegistriesDir: e.registriesD})
}

// TestDockerSignaturePolicy: docker:// images are judged by a
// containers-policy.json with containers/image's own machinery.
func TestDockerSignaturePolicy(t *testing.T) {
	e := newPolicyEnv(t)
	img := ociImageFromLayers(t, tarBytes(t, testRootfs))
	other := ociImageFromLayers(t, tarBytes(t, append(testRootfs[:len(testRootfs):len(testRootfs)], entry{Name: "other", Body: "o"})))
	unsigned := e.push(t, "kurma/unsigned:v1", img, nil)
	signed := e.push(t, "kurma/signed:v1", other, e.good)
	wrongKey := e.push(t, "kurma/wrongkey:v1", other, e.wrong)
	acceptAll := e.policy(t, "accept.json", `{"default": [{"type": "insecureAcceptAnything"}]}`)

	refusals := []struct {
		name, uri, policy string
		opts              []FetchOption
		msg               string
	}{
		{"unsigned, policy requires a signature", unsigned, e.signedByGood, nil, "A signature was required, but no signature exists"},
		{"unsigned, if-signed: the policy as written still requires one", unsigned, e.signedByGood, []FetchOption{WithVerify(VerifyIfSigned)}, "no signature exists"},
		{"signed by the wrong key", wrongKey, e.signedByGood, nil, "rejected by the signature policy"},
		{"required: insecureAcceptAnything counts as reject", unsigned, acceptAll, []FetchOption{WithVerify(VerifyRequired)}, "is rejected by policy"},
		{"required without a policy", unsigned, "", []FetchOption{WithVerify(VerifyRequired)}, "no signature_policy is configured"},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			f := e.fetcher(t, c.policy)
			_, err := f.Fetch(context.Background(), c.uri, c.opts...)
			if !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%v, want ErrSignature saying %q", err, c.msg)
			}
			if imgs, _ := f.List(); len(imgs) != 0 {
				t.Fatalf("refused image stored: %+v", imgs)
			}
			noTemp(t, f.store.dir)
		})
	}

	t.Run("signed by the policy's key", func(t *testing.T) {
		f := e.fetcher(t, e.signedByGood)
		got, err := f.Fetch(context.Background(), signed)
		if err != nil {
			t.Fatal(err)
		}
		if v := got.Verified; v == nil || v.Method != MethodPolicy || v.Mode != VerifyRequired || !strings.HasPrefix(v.Policy, "sha256:") {
			t.Fatalf("verified %+v, want policy under required", v)
		}
		if got.Version != "v1" {
			t.Fatalf("version %q, want the tag", got.Version)
		}
		// Stored and verified under this policy: the same fetch again is a
		// store hit; under another policy it is judged again.
		if _, err := f.Fetch(context.Background(), signed); err != nil {
			t.Fatal(err)
		}
		f2 := newTestFetcher(t, Options{Dir: f.store.dir, InsecureRegistries: []string{e.reg.host}, SignaturePolicy: e.policy(t, "reject.json", `{"default": [{"type": "reject"}]}`), RegistriesDir: e.registriesD})
		if _, err := f2.Fetch(context.Background(), signed); !errors.Is(err, ErrSignature) {
			t.Fatalf("stored image under a policy that rejects everything: %v, want ErrSignature", err)
		}
	})
	t.Run("if-signed with an accept-anything policy", func(t *testing.T) {
		got, err := e.fetcher(t, acceptAll).Fetch(context.Background(), unsigned, WithVerify(VerifyIfSigned))
		if err != nil {
			t.Fatal(err)
		}
		if v := got.Verified; v.Method != MethodPolicy || v.Mode != VerifyIfSigned {
			t.Fatalf("verified %+v", v)
		}
	})
	t.Run("none ignores the policy", func(t *testing.T) {
		got, err := e.fetcher(t, e.signedByGood).Fetch(context.Background(), unsigned, WithVerify(VerifyNone))
		if err != nil {
			t.Fatal(err)
		}
		if v := got.Verified; v.Method != MethodNone || v.Mode != VerifyNone {
			t.Fatalf("verified %+v", v)
		}
	})
	t.Run("image_name is the repository", func(t *testing.T) {
		f := e.fetcher(t, e.signedByGood)
		if _, err := f.Fetch(context.Background(), signed, WithImageName(e.reg.host+"/kurma/other")); !errors.Is(err, ErrImageName) {
			t.Fatalf("%v, want ErrImageName", err)
		}
		if _, err := f.Fetch(context.Background(), signed, WithImageName(e.reg.host+"/kurma/signed")); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOCILayoutSignaturePolicy: a local OCI layout is judged by the same
// policy (transport "oci"); it carries no signatures, so required refuses
// it, and it carries no name, so image_name refuses it.
func TestOCILayoutSignaturePolicy(t *testing.T) {
	dir := writeLayout(t, t.TempDir(), ociImageFromLayers(t, tarBytes(t, testRootfs)))
	pdir := t.TempDir()
	acceptOCI := writeFile(t, pdir, "oci.json", []byte(`{"default": [{"type": "reject"}], "transports": {"oci": {"": [{"type": "insecureAcceptAnything"}]}}}`))
	rejectAll := writeFile(t, pdir, "reject.json", []byte(`{"default": [{"type": "reject"}]}`))
	uri := "file://" + dir
	for _, c := range []struct {
		name, policy string
		opts         []FetchOption
		want         error
	}{
		{"rejected by the policy", rejectAll, nil, ErrSignature},
		{"required: nothing can be signed", acceptOCI, []FetchOption{WithVerify(VerifyRequired)}, ErrSignature},
		{"if-signed: the policy accepts", acceptOCI, []FetchOption{WithVerify(VerifyIfSigned)}, nil},
		{"image_name cannot be checked", acceptOCI, []FetchOption{WithVerify(VerifyIfSigned), WithImageName("example.com/x")}, ErrImageName},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newTestFetcher(t, Options{SignaturePolicy: c.policy})
			img, err := f.Fetch(context.Background(), uri, c.opts...)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				wantTree(t, img.Rootfs, testTree...)
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
		})
	}
}

func TestBadSignaturePolicyStopsNew(t *testing.T) {
	p := writeFile(t, t.TempDir(), "policy.json", []byte(`{"default": [{"type": "nonsense"}]}`))
	if _, err := New(Options{Dir: t.TempDir(), SignaturePolicy: p}); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Fatalf("New with a bad policy: %v", err)
	}
	if _, err := New(Options{Dir: t.TempDir(), SignaturePolicy: filepath.Join(t.TempDir(), "missing.json")}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New with a missing policy: %v", err)
	}
}
