package cniwrap_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/cniwrap"
)

// withKeys returns conf with the given top-level keys set.
func withKeys(t *testing.T, conf []byte, kv map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range kv {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validAttachments is the key kurmad adds to gc's config.
func validAttachments(t *testing.T, conf []byte, pairs ...string) []byte {
	t.Helper()
	list := []map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		list = append(list, map[string]string{"containerID": pairs[i], "ifname": pairs[i+1]})
	}
	return withKeys(t, conf, map[string]any{"cni.dev/valid-attachments": list})
}

// TestGC: gc deletes, with the config it was added with, every cached
// attachment of the network that is not valid (its veth, its host-local
// lease, its masquerade rule), keeps the valid ones, works below CNI 1.1.0
// and when a stale attachment's netns is gone, and then sends GC to the
// plugins for 1.1.0.
func TestGC(t *testing.T) {
	testutil.RequireRoot(t)
	for i, version := range []string{"1.0.0", "1.1.0"} {
		t.Run(version, func(t *testing.T) {
			f := newFixture(t)
			f.path = nftOnly(t)
			netName := fmt.Sprintf("ktwgc%d", i)
			conf := withKeys(t, f.bridgeConf(version, netName), map[string]any{"ipMasq": true})
			type pod struct{ uuid, ns string }
			pods := make([]pod, 3)
			ips := map[string]string{}
			for j := range pods {
				pods[j] = pod{fmt.Sprintf("6d1f9a3c-0000-4000-8000-0000000006%d%d", i, j), f.netns(fmt.Sprintf("gc%d%d", i, j))}
				res := parseResult(t, f.mustRun("add", conf, pods[j].ns, pods[j].uuid, "eth0").stdout, version)
				ips[pods[j].uuid] = res.IPs[0].Address.IP.String()
			}
			t.Cleanup(func() {
				for _, p := range pods { // on failure: what gc should have removed
					f.run("del", conf, p.ns, p.uuid, "eth0")
				}
				// Pod 1's rule: bridge removes a masquerade rule only
				// from inside the pod's netns, which is gone.
				if err := testutil.DeleteMasqueradeRules(pods[1].uuid); err != nil {
					t.Error(err)
				}
			})
			if n := len(testutil.MasqueradeRules(pods[0].uuid, pods[1].uuid, pods[2].uuid)); n != 3 {
				t.Fatalf("%d masquerade rules after 3 adds, want 3", n)
			}
			// Pod 1's netns is gone (the orphan of a lost record whose
			// namespace went with a reboot): gc still releases its lease.
			if err := testutil.RemoveNetnsFile(pods[1].ns); err != nil {
				t.Fatal(err)
			}
			// Today's config differs (another subnet): the stale ones are
			// deleted with the config their add was cached with.
			today := withKeys(t, conf, map[string]any{"ipam": map[string]any{"type": "host-local", "subnet": "10.202.0.0/16", "dataDir": f.ipamDir}})
			r := f.mustRun("gc", validAttachments(t, today, pods[2].uuid, "eth0"))
			for _, p := range pods[:2] {
				if f.leased(netName, netIP(ips[p.uuid])) {
					t.Errorf("pod %s: lease %s kept after gc", p.uuid, ips[p.uuid])
				}
				if rules := testutil.MasqueradeRules(p.uuid); len(rules) > 0 && p == pods[0] {
					t.Errorf("pod %s: masquerade rule kept after gc: %v", p.uuid, rules)
				}
			}
			if testutil.IPv4In(t, pods[0].ns, "eth0") != nil {
				t.Error("pod 0's eth0 still exists after gc")
			}
			if !f.leased(netName, netIP(ips[pods[2].uuid])) || testutil.IPv4In(t, pods[2].ns, "eth0") == nil || len(testutil.MasqueradeRules(pods[2].uuid)) != 1 {
				t.Errorf("gc touched the valid attachment of pod 2\nstderr: %s", r.stderr)
			}
			if strings.Count(r.stderr, "stale attachment deleted") != 2 {
				t.Errorf("gc's log does not say it deleted 2 stale attachments:\n%s", r.stderr)
			}
			// Nothing stale is left: a second gc deletes nothing, and gc
			// with no valid attachment at all deletes the last one.
			if r := f.mustRun("gc", validAttachments(t, conf, pods[2].uuid, "eth0")); strings.Contains(r.stderr, "deleted") {
				t.Errorf("second gc deleted something:\n%s", r.stderr)
			}
			f.mustRun("gc", conf)
			if f.leased(netName, netIP(ips[pods[2].uuid])) || len(testutil.MasqueradeRules(pods[2].uuid)) != 0 {
				t.Error("gc without valid attachments kept pod 2's lease or rule")
			}
			if files, _ := os.ReadDir(filepath.Join(f.cacheDir, "results")); len(files) != 0 {
				t.Errorf("libcni cache not emptied by gc: %v", files)
			}
		})
	}
}

func netIP(s string) net.IP { return net.ParseIP(s) }

// nftOnly is a PATH holding nft and no iptables, as in kurma's plugin
// image, so that bridge's ipMasq uses nftables.
func nftOnly(t *testing.T) string {
	t.Helper()
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Fatalf("nft: %v (install nftables)", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(nft, filepath.Join(dir, "nft")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGCRefusals: disableGC leaves everything; a malformed attachment list
// and arguments are errors.
func TestGCRefusals(t *testing.T) {
	testutil.RequireRoot(t)
	f := newFixture(t)
	ns := f.netns("gcr")
	uuid := "6d1f9a3c-0000-4000-8000-0000000007aa"
	conf := f.bridgeConf("1.1.0", "ktwgcr")
	res := parseResult(t, f.mustRun("add", conf, ns, uuid, "eth0").stdout, "1.1.0")
	t.Cleanup(func() { f.run("del", conf, ns, uuid, "eth0") })

	f.mustRun("gc", withKeys(t, conf, map[string]any{"disableGC": true}))
	if !f.leased("ktwgcr", res.IPs[0].Address.IP) {
		t.Error("gc with disableGC released a lease")
	}
	for _, tc := range []struct {
		name string
		conf []byte
		args []string
	}{
		{"bad attachments", withKeys(t, conf, map[string]any{"cni.dev/valid-attachments": "eth0"}), nil},
		{"arguments", conf, []string{ns}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.run("gc", tc.conf, tc.args...)
			var e cniwrap.ErrorObject
			if r.code != 1 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code == 0 {
				t.Errorf("exit %d stdout %q, want exit 1 and an error object", r.code, r.stdout)
			}
		})
	}
	if !f.leased("ktwgcr", res.IPs[0].Address.IP) {
		t.Error("a refused gc released a lease")
	}
}

// TestStatus: status answers ready for a 1.1.0 config whose plugins answer
// STATUS, passes a plugin's error object on (code 50 and its message),
// is not asked of plugins below 1.1.0, and fails (code 50) for a plugin
// missing from CNI_PATH.
func TestStatus(t *testing.T) {
	f := &fixture{t: t, bin: bins(t), cacheDir: filepath.Join(t.TempDir(), "cache")}
	dir := t.TempDir()
	for _, name := range []string{"bridge", "host-local"} {
		if err := os.Link(filepath.Join(f.bin, name), filepath.Join(dir, name)); err != nil {
			testutil.CopyExecutable(t, filepath.Join(f.bin, name), filepath.Join(dir, name))
		}
	}
	script := `#!/bin/sh
if [ "$CNI_COMMAND" = STATUS ]; then
  echo '{"cniVersion":"1.1.0","code":50,"msg":"ktw-notready: upstream link down"}'
  exit 1
fi
echo '{"cniVersion":"1.1.0"}'
`
	if err := os.WriteFile(filepath.Join(dir, "ktw-notready"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.cniPath = dir

	f.mustRun("status", []byte(`{"cniVersion":"1.1.0","name":"ktws","type":"bridge","ipam":{"type":"host-local","subnet":"10.203.0.0/16"}}`))
	notReady := `{"cniVersion":"1.1.0","name":"ktws","plugins":[{"type":"bridge","ipam":{"type":"host-local","subnet":"10.203.0.0/16"}},{"type":"ktw-notready"}]}`
	r := f.run("status", []byte(notReady))
	var e cniwrap.ErrorObject
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code != 50 || !strings.Contains(e.Msg, "upstream link down") {
		t.Errorf("not ready: exit %d stdout %q, want exit 1 and error 50 with the plugin's message", r.code, r.stdout)
	}
	below := strings.Replace(notReady, `"1.1.0"`, `"1.0.0"`, 1)
	if r := f.run("status", []byte(below)); r.code != 0 {
		t.Errorf("status of a 1.0.0 config: exit %d stdout %q; STATUS is not asked below 1.1.0", r.code, r.stdout)
	}
	// A plugin missing from CNI_PATH is not ready at any version: setup,
	// which fails on it, runs beside the first status, not before it.
	for _, v := range []string{"1.0.0", "1.1.0"} {
		missing := `{"cniVersion":"` + v + `","name":"ktws","type":"ktw-nosuch"}`
		var e cniwrap.ErrorObject
		if r := f.run("status", []byte(missing)); r.code != 1 || json.Unmarshal([]byte(r.stdout), &e) != nil ||
			e.Code != 50 || !strings.Contains(e.Msg, `"ktw-nosuch"`) {
			t.Errorf("%s config naming a missing plugin: exit %d stdout %q, want exit 1 and error 50 naming it", v, r.code, r.stdout)
		}
	}
	if r := f.run("status", []byte(notReady), "x"); r.code != 1 {
		t.Errorf("status with arguments: exit %d", r.code)
	}
}

// TestCheckPrevResult: with libcni's cache lost, check checks against the
// prevResult kurmad puts in the config: it passes while the attachment is
// whole and fails once its interface is gone; without one it cannot check.
func TestCheckPrevResult(t *testing.T) {
	testutil.RequireRoot(t)
	f := newFixture(t)
	ns := f.netns("chk")
	uuid := "6d1f9a3c-0000-4000-8000-0000000008aa"
	conf := f.bridgeConf("1.0.0", "ktwchk")
	out := f.mustRun("add", conf, ns, uuid, "eth0").stdout
	t.Cleanup(func() { f.run("del", conf, ns, uuid, "eth0") })
	var prev map[string]any
	if err := json.Unmarshal([]byte(out), &prev); err != nil {
		t.Fatal(err)
	}
	withPrev := withKeys(t, conf, map[string]any{"prevResult": prev})
	f.mustRun("check", withPrev, ns, uuid, "eth0") // the cache's result is used

	if err := os.RemoveAll(filepath.Join(f.cacheDir, "results")); err != nil {
		t.Fatal(err)
	}
	if r := f.run("check", conf, ns, uuid, "eth0"); r.code == 0 {
		t.Error("check without cache or prevResult passed")
	}
	r := f.mustRun("check", withPrev, ns, uuid, "eth0")
	if !strings.Contains(r.stderr, "prevResult on stdin") {
		t.Errorf("check did not say it used the prevResult on stdin:\n%s", r.stderr)
	}
	testutil.DelLinkIn(t, ns, "eth0")
	r = f.run("check", withPrev, ns, uuid, "eth0")
	var e cniwrap.ErrorObject
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &e) != nil || !strings.Contains(e.Msg+e.Details, "eth0") {
		t.Errorf("check after the interface was deleted: exit %d stdout %q, want a failure naming eth0", r.code, r.stdout)
	}
}
