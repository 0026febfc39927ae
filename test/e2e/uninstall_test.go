package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// TestUninstall: kurmactl uninstall removes the pods through their
// plugins, stops kurmad, then what kurma made on the host and nothing
// else, saying each: the bridge its network's plugin made, the nft tables
// of ipMasq and portmap, the state and run dirs; a bridge another network
// names that has a port of the host's stays, and so does an nft table of
// the host's. Without --yes it only says what it would remove. The host is
// a network namespace of the test's own, where kurmad runs, as installed:
// without --stop-plugins, so the uninstall's own stop must end its plugin
// containers.
func TestUninstall(t *testing.T) {
	e := newEnv(t)
	e.StopPlugins = false
	host := testutil.NewNetnsFile(t, filepath.Join(t.TempDir(), "hostns"))
	e.Wrap = []string{"nsenter", "--net=" + host}
	in := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + host}, args...)...).CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := in(args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	// The host's own: a bridge network b names, with a port on it, and an
	// nft table.
	must("ip", "link", "add", "kt-e2e1", "type", "bridge")
	must("ip", "link", "add", "kte-port", "type", "veth", "peer", "name", "kte-peer")
	must("ip", "link", "set", "kte-port", "master", "kt-e2e1")
	must("nft", "add", "table", "inet", "kt_host")

	a := netDef{Name: "a", Default: true, Conf: map[string]any{"cniVersion": "1.0.0", "plugins": []any{
		map[string]any{"type": "bridge", "bridge": "kt-e2e0", "isGateway": true, "ipMasq": true,
			"ipam": map[string]any{"type": "host-local", "subnet": "10.204.0.0/16"}},
		map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
	}}}
	b := bridgeNet("b", "kt-e2e1", "10.205.0.0/16", "", false)
	e.writeConfig([]netDef{a, b}, nil)
	e.start()
	p1 := e.createPod("--publish", "18080:80")
	p2 := e.createPod()
	tables := must("nft", "list", "tables")
	for _, want := range []string{"table inet cni_plugins_masquerade", "table ip cni_hostport", "table inet kt_host"} {
		if !strings.Contains(tables, want) {
			t.Fatalf("before the uninstall, nft lists no %s:\n%s", want, tables)
		}
	}

	out, err := in(bin("kurmactl"), "--socket", e.Socket, "uninstall")
	if exitCode(err) != 1 || !strings.Contains(out, "would remove pod "+p1.ID) || !strings.Contains(out, "would stop kurmad (pid ") ||
		!strings.Contains(out, "would remove "+e.StateDir) || !strings.Contains(out, "nothing was removed: run kurmactl uninstall --yes") {
		t.Errorf("uninstall without --yes: %v\n%s", err, out)
	}
	if n := len(e.listPods()); n != 2 || !e.Running() {
		t.Fatalf("after uninstall without --yes: %d pods, kurmad running %v", n, e.Running())
	}

	out, err = in(bin("kurmactl"), "--socket", e.Socket, "uninstall", "--yes")
	if err != nil {
		t.Fatalf("uninstall --yes: %v\n%s", err, out)
	}
	t.Logf("uninstall --yes:\n%s", out)
	e.waitExit(30 * time.Second)
	for _, want := range []string{
		"removed pod " + p1.ID, "removed pod " + p2.ID, "stopped kurmad (pid ",
		"removed bridge kt-e2e0 (network a's", "kept bridge kt-e2e1 (network b): ports are on it (kte-port)",
		"removed nft table inet cni_plugins_masquerade", "removed nft table ip cni_hostport",
		"removed " + e.StateDir, "removed " + e.RunDir,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall did not say %q", want)
		}
	}
	// The pods went through their plugins (their dels ran) before kurmad
	// stopped.
	if n := len(regexp.MustCompile(`msg="pod deleted"`).FindAllString(e.Log(), -1)); n != 2 {
		t.Errorf("kurmad logged %d pod deletes, want 2", n)
	}
	links := must("ip", "-o", "link", "show")
	if strings.Contains(links, "kt-e2e0") || !strings.Contains(links, "kt-e2e1") || !strings.Contains(links, "kte-port") {
		t.Errorf("links after the uninstall:\n%s", links)
	}
	if got := strings.Fields(must("nft", "list", "tables")); !slices.Equal(got, []string{"table", "inet", "kt_host"}) {
		t.Errorf("nft tables after the uninstall: %q, want the host's alone", got)
	}
	for _, d := range []string{e.StateDir, e.RunDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s after the uninstall: %v", d, err)
		}
	}
	e.checkCleanStopped()
}
