package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// readmePodmanSnippet is README's block marked podman-snippet.
func readmePodmanSnippet(t *testing.T) string {
	t.Helper()
	blocks, err := testutil.Blocks(filepath.Join(testutil.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Kind == "podman-snippet" {
			return b.Text
		}
	}
	t.Fatal("README.md has no block marked podman-snippet")
	return ""
}

// TestReadmePodmanSnippet runs README's podman snippet with bash, a real
// podman and a real kurmad, every command as README writes it, but for
// what would touch the host's own setup: its paths (/etc/cni/net.d,
// /etc/kurma, /opt/cni/bin, /tmp/web) are moved into the test's dirs, its
// conflist is examples/cni/podman.conflist pointed at this kurmad (socket,
// network rtnet) under a CNI network name of the tests', its port is a
// free one, and podman keeps its storage and run state in the test's dir.
// The page the container serves comes back through the published port,
// kurmactl lists the container as podman's pod, and once the snippet's
// podman rm ran kurmad holds nothing and no port rule is left.
func TestReadmePodmanSnippet(t *testing.T) {
	r := newRuntimeEnv(t)
	busybox(t) // the snippet copies /bin/busybox: it must be static
	snippet := readmePodmanSnippet(t)

	const cniNet = "ktrtreadme"
	forgetCNICache(t, cniNet)
	dir, err := os.MkdirTemp("", "ktrt-readme-")
	if err != nil {
		t.Fatal(err)
	}
	podmanDir := filepath.Join(dir, "podman")
	storage := filepath.Join(dir, "storage.conf")
	if err := os.WriteFile(storage, []byte("[storage]\ndriver = \"vfs\"\ngraphroot = \""+filepath.Join(podmanDir, "store")+
		"\"\nrunroot = \""+filepath.Join(podmanDir, "runroot")+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conflist := filepath.Join(dir, "podman.conflist")
	if err := os.WriteFile(conflist, r.exampleConflist(t, "podman", cniNet, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(dir, "kurma-etc") // the snippet's /etc/kurma
	podmanConf := filepath.Join(etc, "podman.conf")
	env := append(os.Environ(), "CONTAINERS_STORAGE_CONF="+storage, "KURMA_SOCKET="+r.Socket,
		"PATH="+binDir+":"+os.Getenv("PATH"))
	// Whatever the snippet leaves when it fails half-way goes with podman's
	// own cleanup (its containers removed, their DEL run through kurmad).
	pm := &testutil.Podman{Dir: dir, Env: append(env, "CONTAINERS_CONF="+podmanConf)}
	t.Cleanup(func() {
		if _, err := os.Stat(podmanConf); err != nil { // the snippet stopped before podman ran
			if err := os.RemoveAll(dir); err != nil {
				t.Error(err)
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := pm.Cleanup(ctx); err != nil {
			t.Errorf("podman cleanup: %v", err)
		}
	})

	port := freePort(t)
	script := strings.NewReplacer(
		"examples/cni/podman.conflist", conflist,
		"/etc/cni/net.d", filepath.Join(dir, "net.d"),
		"/etc/kurma", etc,
		"/opt/cni/bin", r.cniBin,
		"/tmp/web", filepath.Join(dir, "web"),
		"kurma-podman", cniNet,
		"8080", strconv.Itoa(port),
		// podman's run state (/run/libpod) and events, in the test's dir.
		"[engine]\n", "[engine]\ntmp_dir = \""+filepath.Join(podmanDir, "tmp")+"\"\nevents_logger = \"file\"\n"+
			"events_logfile_path = \""+filepath.Join(podmanDir, "events.log")+"\"\n",
	).Replace(snippet)
	if strings.Contains(script, "/etc/") || strings.Contains(script, "/tmp/web") {
		t.Fatalf("the snippet names a host path the test does not move:\n%s", script)
	}
	if err := os.MkdirAll(etc, 0o755); err != nil { // README's install made /etc/kurma
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = testutil.RepoRoot(), env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the snippet failed: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, &stdout, &stderr)
	}
	out := stdout.String()
	if !strings.Contains(out, "hello from an image-shipped plugin") {
		t.Errorf("curl did not get the page through the published port; stdout:\n%s", out)
	}
	if !strings.Contains(out, "podman/") {
		t.Errorf("kurmactl pod ls did not list a pod owned by podman; stdout:\n%s", out)
	}
	r.checkNoPods(t)
	if portRule(t, port) {
		t.Errorf("a rule for port %d is left after the snippet's podman rm", port)
	}
}
