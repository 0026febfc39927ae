package e2e

import (
	"os"
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
	ok.ACI = "file://" + signed
	ok.Conf["image_name"] = "kurma.dev/cni-netplugin"
	failing := []struct {
		net    netDef
		reason string
	}{
		{netDef{Name: "wrongkey", ACI: "file://" + wrongKey, Conf: map[string]any{"type": "bridge"}}, "signature does not verify with any trusted key"},
		{netDef{Name: "unsigned", ACI: "file://" + unsigned, Conf: map[string]any{"type": "bridge"}}, "verify is required and file://" + unsigned + " has no signature"},
		{netDef{Name: "misnamed", ACI: "file://" + signed, Conf: map[string]any{"type": "bridge", "image_name": "kurma.dev/other-plugin"}},
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
		var n api.Network
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
