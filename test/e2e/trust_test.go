package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// copySigned copies the test image to dir/name and, when by is not nil,
// writes its detached signature beside it.
func copySigned(t *testing.T, dir, name string, by *openpgp.Entity) string {
	t.Helper()
	body, err := os.ReadFile(testImage())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if by != nil {
		if err := os.WriteFile(p+".asc", testutil.DetachSign(t, by, body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestUntrustedImagesFailTheirNetwork: with trusted_keys set (so verify is
// required), a network whose ACI is signed by the key trusted for its name
// runs; networks whose image is signed by another key, unsigned, or named
// otherwise than their image_name are failed with the reason, and creates
// on them get 503. The trusted image shows how it was verified.
func TestUntrustedImagesFailTheirNetwork(t *testing.T) {
	e := newEnv(t)
	good, goodKey := testutil.SigningKey(t, e.Dir, "good")
	stranger, _ := testutil.SigningKey(t, e.Dir, "stranger")
	signed := copySigned(t, e.Dir, "signed.aci", good)
	wrongKey := copySigned(t, e.Dir, "wrongkey.aci", stranger)
	unsigned := copySigned(t, e.Dir, "unsigned.aci", nil)

	ok := bridgeNet("signed", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	ok.Image = "file://" + signed
	ok.Conf["image_name"] = "kurma.dev/cni-netplugin"
	failing := []struct {
		net    netDef
		reason string
	}{
		{netDef{Name: "wrongkey", Image: "file://" + wrongKey, Conf: map[string]any{"type": "bridge", "image_name": "kurma.dev/cni-netplugin"}}, "signature does not verify with any trusted key"},
		{netDef{Name: "unsigned", Image: "file://" + unsigned, Conf: map[string]any{"type": "bridge", "image_name": "kurma.dev/cni-netplugin"}}, "verify is required and file://" + unsigned + " has no signature"},
		{netDef{Name: "misnamed", Image: "file://" + signed, Conf: map[string]any{"type": "bridge", "image_name": "kurma.dev/other-plugin"}},
			`image is named "kurma.dev/cni-netplugin", the network expects "kurma.dev/other-plugin"`},
	}
	nets := []netDef{ok}
	for _, f := range failing {
		nets = append(nets, f.net)
	}
	e.writeConfig(nets, map[string]any{"trusted_keys": []map[string]string{{"prefix": "kurma.dev", "key": goodKey}}})
	e.networks = []string{"signed"} // the one start waits for
	e.start()

	for _, f := range failing {
		// start waits for signed alone: each of these fails its fetch
		// in its own time.
		var n api.Generation
		testutil.WaitFor(t, 30*time.Second, f.net.Name+" to fail", func() error { return e.networkIn(f.net.Name, api.StateFailed, &n) })
		if !strings.Contains(n.Reason, f.reason) {
			t.Errorf("network %s: state %s reason %q, want failed with %q", f.net.Name, n.State, n.Reason, f.reason)
		}
		_, took, err := e.timedCreate(f.net.Name)
		wantUnavailable(t, f.net.Name, f.net.Name, err, took)
	}
	pod := e.createPod("--net", "signed")
	e.mustCtl("pod", "rm", pod.ID)

	out := e.mustCtl("image", "ls")
	fpr := strings.ToUpper(good.PrimaryKey.KeyIdString())
	if !strings.Contains(out, "kurma.dev/cni-netplugin") || !strings.Contains(out, "key "+fpr) {
		t.Errorf("image ls does not show the image verified by key %s:\n%s", fpr, out)
	}
	if lines := strings.Count(strings.TrimSpace(out), "\n"); lines != 1 {
		t.Errorf("image ls lists %d images, want only the trusted one:\n%s", lines, out)
	}
}

// TestPrefixScopedKeysBindTheName: keys trusted for a.example/ and
// b.example/; an image named b.example/x, validly signed by b's key, where
// a network whose image_name is a.example/x takes its image, fails that
// network with a reason naming both names. Without image_name the same
// config stops kurmad at load with the hint to add it: the signing key
// would otherwise be chosen by the name the image gives itself.
func TestPrefixScopedKeysBindTheName(t *testing.T) {
	e := newEnv(t)
	_, aKey := testutil.SigningKey(t, e.Dir, "a")
	b, bKey := testutil.SigningKey(t, e.Dir, "b")
	img := filepath.Join(e.Dir, "x.aci")
	testutil.WriteACI(t, img, "b.example/x", []string{"/bin/main"}, nil)
	body, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img+".asc", testutil.DetachSign(t, b, body), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := map[string]any{"trusted_keys": []map[string]string{{"prefix": "a.example/", "key": aKey}, {"prefix": "b.example/", "key": bKey}}}
	ok := bridgeNet("fine", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	ok.Conf["verify"] = "none" // the test image is unsigned
	swapped := netDef{Name: "swapped", Image: "file://" + img, Conf: map[string]any{"type": "bridge", "image_name": "a.example/x"}}

	delete(swapped.Conf, "image_name")
	e.writeConfig([]netDef{ok, swapped}, keys)
	cmd := exec.Command(bin("kurmad"), "--config", e.Config, "--socket", e.Socket)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); exitCode(err) <= 0 {
		t.Fatalf("kurmad with prefix-scoped keys and no image_name: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "pod_networks[1]") || !strings.Contains(stderr.String(), `add "image_name"`) {
		t.Errorf("kurmad's refusal does not name the entry and the fix:\n%s", stderr.String())
	}

	swapped.Conf["image_name"] = "a.example/x"
	e.writeConfig([]netDef{ok, swapped}, keys)
	e.networks = []string{"fine"}
	e.start()
	n, err := e.network("swapped")
	if err != nil {
		t.Fatal(err)
	}
	if n.State != api.StateFailed || !strings.Contains(n.Reason, `"b.example/x"`) || !strings.Contains(n.Reason, `"a.example/x"`) {
		t.Errorf("network swapped: %s %q; want failed naming b.example/x and a.example/x", n.State, n.Reason)
	}
}

// TestReloadTrustsANewKey: a key added to trusted_keys by a reload (as
// kurma-node adds a Network's spec.trust) verifies the image of a network
// added with it; a network that was running keeps its generation, and its
// verify "none" (written out, as kurma-node does) holds. A key file that
// holds no key is a reload problem and changes nothing.
func TestReloadTrustsANewKey(t *testing.T) {
	e := newEnv(t)
	good, goodKey := testutil.SigningKey(t, e.Dir, "good")
	plain := bridgeNet("plain", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	e.writeConfig([]netDef{plain}, map[string]any{"verify": "none"})
	e.start()

	signed := netDef{Name: "signed", Image: "file://" + copySigned(t, e.Dir, "signed.aci", good),
		Conf: map[string]any{"type": "bridge", "bridge": "kt-e2e1", "verify": "required", "image_name": "kurma.dev/cni-netplugin",
			"ipam": map[string]any{"type": "host-local", "subnet": "10.205.0.0/16"}}}
	bad := filepath.Join(e.Dir, "bad.asc")
	if err := os.WriteFile(bad, []byte("not a key"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.writeConfig([]netDef{plain, signed}, map[string]any{"verify": "none",
		"trusted_keys": []map[string]string{{"prefix": "kurma.dev", "key": bad}}})
	if _, errOut, err := e.ctl("reload"); exitCode(err) != 2 || !strings.Contains(errOut, bad) {
		t.Fatalf("reload with a key file that holds no key: exit %d, %s; want 2 naming %s", exitCode(err), errOut, bad)
	}
	e.writeConfig([]netDef{plain, signed}, map[string]any{"verify": "none",
		"trusted_keys": []map[string]string{{"prefix": "kurma.dev", "key": goodKey}}})
	res := e.reload()
	if len(res.Added) != 1 || res.Added[0] != "signed" || len(res.Unchanged) != 1 {
		t.Errorf("reload: added %v unchanged %v, want signed added and plain unchanged", res.Added, res.Unchanged)
	}
	e.waitGenerations("signed running beside plain", map[string]string{"plain/1": api.StateRunning, "signed/1": api.StateRunning})
	out := e.mustCtl("image", "ls")
	if fpr := strings.ToUpper(good.PrimaryKey.KeyIdString()); !strings.Contains(out, "key "+fpr) {
		t.Errorf("image ls does not show signed's image verified by the new key %s:\n%s", fpr, out)
	}
}

// TestRefusedReloadKeepsTheTrust: a reload that brings a new trusted key
// together with an invalid network changes nothing: the trust and the
// networks take effect together or not at all. The old key still judges
// the fetches that follow (a retried network signed by another key stays
// failed); a valid reload with the new key makes that network run.
func TestRefusedReloadKeepsTheTrust(t *testing.T) {
	e := newEnv(t)
	_, goodKey := testutil.SigningKey(t, e.Dir, "good")
	other, otherKey := testutil.SigningKey(t, e.Dir, "other")
	plain := bridgeNet("plain", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	plain.Conf["verify"] = "none"
	signed := netDef{Name: "signed", Image: "file://" + copySigned(t, e.Dir, "signed.aci", other),
		Conf: map[string]any{"type": "bridge", "bridge": "kt-e2e1", "verify": "required", "image_name": "kurma.dev/cni-netplugin",
			"ipam": map[string]any{"type": "host-local", "subnet": "10.205.0.0/16"}}}
	trust := func(key string) map[string]any {
		return map[string]any{"trusted_keys": []map[string]string{{"prefix": "kurma.dev", "key": key}}}
	}
	e.writeConfig([]netDef{plain, signed}, trust(goodKey))
	e.start()
	failed := e.waitGenerations("signed failed: signed by a key not trusted", map[string]string{"plain/1": api.StateRunning, "signed/1": api.StateFailed})

	// The new key and an invalid network (a name twice): refused whole.
	e.writeConfig([]netDef{plain, signed, plain}, trust(otherKey))
	if _, errOut, err := e.ctl("reload"); exitCode(err) != 2 || !strings.Contains(errOut, "plain") {
		t.Fatalf("reload with a network named twice: exit %d, %s; want 2 naming plain", exitCode(err), errOut)
	}
	// A fetch now is judged by the old key: signed fails again.
	e.mustCtl("net", "retry", "signed")
	testutil.WaitFor(t, 60*time.Second, "signed fetched again and failed", func() error {
		g := e.generations()["signed/1"]
		if g.State != api.StateFailed || !g.Since.After(failed["signed/1"].Since) {
			return fmt.Errorf("signed %s since %s, want failed again after %s", g.State, g.Since, failed["signed/1"].Since)
		}
		return nil
	})

	// The same key with valid networks takes effect: signed runs.
	e.writeConfig([]netDef{plain, signed}, trust(otherKey))
	e.reload()
	e.mustCtl("net", "retry", "signed")
	e.waitGenerations("signed running under the new key", map[string]string{"plain/1": api.StateRunning, "signed/1": api.StateRunning})
}
