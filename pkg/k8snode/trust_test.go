package k8snode

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// TestMergeTrust: a Network's key joins kurmad's trusted_keys with its
// prefix and the network requires a signature; base's default verify mode
// is written out, so the key changes nothing for base's networks; kurmad
// has one signature_policy, so a second Network's policy, or one beside
// the ConfigMap's, is refused naming who holds it.
func TestMergeTrust(t *testing.T) {
	dir := t.TempDir()
	_, key := testutil.SigningKey(t, dir, "net")
	policy := dir + "/policy.json"
	if err := os.WriteFile(policy, []byte(`{"default": [{"type": "reject"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := []*NetworkObject{
		network("keyed", NetworkSpec{Image: "https://example.com/net.aci", ImageName: "example.com/net",
			Trust: &NetworkTrust{Kind: TrustAppcKey}, Config: map[string]json.RawMessage{"type": json.RawMessage(`"bridge"`)}}),
		network("pol1", NetworkSpec{Image: "docker://registry.example/a:v1", Trust: &NetworkTrust{Kind: TrustPolicy},
			Config: map[string]json.RawMessage{"type": json.RawMessage(`"bridge"`)}}),
		network("pol2", NetworkSpec{Image: "docker://registry.example/b:v1", Trust: &NetworkTrust{Kind: TrustPolicy},
			Config: map[string]json.RawMessage{"type": json.RawMessage(`"bridge"`)}}),
	}
	images := map[string]string{}
	for _, o := range objs {
		images[o.Metadata.Name] = o.Spec.Image
	}
	trust := map[string]TrustFile{
		"keyed": {Kind: TrustAppcKey, Prefix: "example.com/net", Path: key},
		"pol1":  {Kind: TrustPolicy, Path: policy}, "pol2": {Kind: TrustPolicy, Path: policy},
	}
	m, err := Merge([]byte(mergeBase), objs, images, trust, "/")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconfig.Parse(m.Config, "/")
	if err != nil {
		t.Fatalf("kurmad refuses the merged config: %v\n%s", err, m.Config)
	}
	if len(cfg.TrustedKeys) != 1 || cfg.TrustedKeys[0] != (netconfig.TrustedKey{Prefix: "example.com/net", KeyFile: key}) {
		t.Errorf("trusted_keys %+v, want keyed's key for example.com/net", cfg.TrustedKeys)
	}
	if cfg.SignaturePolicy != policy {
		t.Errorf("signature_policy %q, want pol1's %s", cfg.SignaturePolicy, policy)
	}
	if cfg.Verify != netconfig.VerifyNone {
		t.Errorf("top-level verify %q: base's default (none) must be written out", cfg.Verify)
	}
	for name, want := range map[string]string{"podnet": netconfig.VerifyNone, "keyed": netconfig.VerifyRequired, "pol1": netconfig.VerifyRequired} {
		if n, ok := cfg.Network(name); !ok || cfg.EffectiveVerify(n) != want {
			t.Errorf("%s: in the config %v, verify %q, want %q", name, ok, cfg.EffectiveVerify(n), want)
		}
	}
	if r := m.Refused["pol2"]; r.State != StateConflict || !strings.Contains(r.Reason, `Network "pol1"`) {
		t.Errorf("pol2: %+v, want a conflict naming pol1", r)
	}
	if len(m.Refused) != 1 {
		t.Errorf("refused %v", m.Refused)
	}

	withPolicy := strings.Replace(mergeBase, `"plugin_timeout": "1m"`, `"plugin_timeout": "1m", "signature_policy": "`+policy+`"`, 1)
	m, err = Merge([]byte(withPolicy), objs[1:2], images, trust, "/")
	if err != nil {
		t.Fatal(err)
	}
	if r := m.Refused["pol1"]; r.State != StateConflict || !strings.Contains(r.Reason, "ConfigMap") {
		t.Errorf("pol1 beside the ConfigMap's policy: %+v, want a conflict naming the ConfigMap", r)
	}
	if cfg, err := netconfig.Parse(m.Config, "/"); err != nil || cfg.Verify != netconfig.VerifyRequired {
		t.Errorf("base with a policy: verify %q (%v), want its default, required, written out", cfg.Verify, err)
	}
}

// TestCheckTrust: what kurmad would refuse to read as a key or a policy
// is refused before it reaches kurmad, whose reload would fail whole.
func TestCheckTrust(t *testing.T) {
	_, keyFile := testutil.SigningKey(t, t.TempDir(), "k")
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind, data string
		ok         bool
	}{
		{TrustAppcKey, string(key), true},
		{TrustAppcKey, "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot base64\n-----END PGP PUBLIC KEY BLOCK-----\n", false},
		{TrustAppcKey, "", false},
		{TrustPolicy, `{"default": [{"type": "insecureAcceptAnything"}]}`, true},
		{TrustPolicy, `{"default": [{"type": "signedBy"}]}`, false},
		{TrustPolicy, `not json`, false},
		{"cosign", string(key), false},
	} {
		if err := CheckTrust(c.kind, []byte(c.data)); (err == nil) != c.ok {
			t.Errorf("%s %.30q: %v, want ok %v", c.kind, c.data, err, c.ok)
		}
	}
	o := network("n", NetworkSpec{Trust: &NetworkTrust{Kind: TrustAppcKey}})
	if _, err := o.trustPrefix(); !errors.Is(err, ErrTrust) {
		t.Errorf("a key without prefix or imageName: %v, want ErrTrust", err)
	}
	if _, _, _, err := (&NetworkTrust{}).source(); !errors.Is(err, ErrTrust) {
		t.Errorf("neither secretRef nor configMapRef: %v, want ErrTrust", err)
	}
}
