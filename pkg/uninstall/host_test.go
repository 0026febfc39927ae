package uninstall

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// TestReadNetworksPolicy: the config's policy network is named, and its
// entry (no bridge of its own) is not read as a bridge network.
func TestReadNetworksPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kurmad.json")
	conf := `{"pod_networks": [
		{"name": "podnet", "image": "file:///x.aci", "type": "bridge", "bridge": "kt-podnet0", "network_policy": true,
		 "ipam": {"type": "host-local", "subnet": "10.1.0.0/16"}},
		{"name": "netpol", "image": "file:///n.aci", "role": "policy", "type": "bridge"}]}`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	nets, policy, err := readNetworks(path)
	if err != nil {
		t.Fatal(err)
	}
	if policy != "netpol" || len(nets) != 1 || nets[0].bridge != "kt-podnet0" {
		t.Errorf("policy %q, bridges %+v; want netpol and kt-podnet0 alone", policy, nets)
	}
}

// TestNetpolTables: the tables a stopped policy network's daemons left
// (kurma-netpol-<network>-<8 hex>, as plugins/netpol names them) are
// removed, real nft tables on this host; a table of another network whose
// name starts alike, and one whose suffix is not a daemon's, are kept.
func TestNetpolTables(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft: %v", err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	network := "kt" + hex.EncodeToString(b)
	left := netpolTablePrefix + network + "-0a1b2c3d"
	other := netpolTablePrefix + network + "-x-0a1b2c3d" // network <network>-x's
	notOurs := netpolTablePrefix + network + "-mine"
	for _, name := range []string{left, other, notOurs} {
		if out, err := exec.Command("nft", "add", "table", "inet", name).CombinedOutput(); err != nil {
			t.Fatalf("nft add table %s: %v: %s", name, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", name).Run() })
	}
	exists := func(name string) bool { return exec.Command("nft", "list", "table", "inet", name).Run() == nil }

	var out strings.Builder
	dry := &run{o: Options{DryRun: true, Out: &out}}
	dry.netpolTables(network)
	if !exists(left) || !strings.Contains(out.String(), "would remove nft table inet "+left) {
		t.Errorf("dry run: %q; the table is there: %v", out.String(), exists(left))
	}

	out.Reset()
	u := &run{o: Options{Out: &out}}
	u.netpolTables(network)
	if u.err != nil {
		t.Fatal(u.err)
	}
	if exists(left) {
		t.Errorf("%s was left: %s", left, out.String())
	}
	if want := "removed nft table inet " + left + " (policy network " + network + "'s daemon's, left when it stopped)"; !strings.Contains(out.String(), want) {
		t.Errorf("said %q, want %q", out.String(), want)
	}
	for _, name := range []string{other, notOurs} {
		if !exists(name) || strings.Contains(out.String(), name) {
			t.Errorf("%s, not the policy network's daemons', was removed: %s", name, out.String())
		}
	}
}
