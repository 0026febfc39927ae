package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
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

	// A host with podman installed: Debian's podman ships a conflist of its
	// default network, whose plugins are not in kurma's CNI bin dir.
	if err := os.MkdirAll(filepath.Join(dir, "net.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "net.d", "87-podman-bridge.conflist"), []byte(podmanDefaultConflist), 0o644); err != nil {
		t.Fatal(err)
	}

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
	// Every command as README writes it runs quietly: no warning of
	// podman's about its own default network, or anything else.
	if w := regexp.MustCompile(`(?mi)^.*(warn|error).*$`).FindAllString(stderr.String(), -1); len(w) > 0 {
		t.Errorf("the snippet printed warnings:\n%s\nscript:\n%s", strings.Join(w, "\n"), script)
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

// podmanDefaultConflist is the conflist of podman's default network
// Debian's podman 4.3 installs as /etc/cni/net.d/87-podman-bridge.conflist.
const podmanDefaultConflist = `{
  "cniVersion": "0.4.0",
  "name": "podman",
  "plugins": [
    {"type": "bridge", "bridge": "cni-podman0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "10.88.0.0/16", "gateway": "10.88.0.1"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"},
    {"type": "tuning"}
  ]
}`

// TestReadmeAgrees: README's config (what its install writes) has the
// network its podman snippet attaches to (examples/cni/podman.conflist's
// "network"), with examples/pod_networks.json's meaning but for the image,
// which is where README's install copies it.
func TestReadmeAgrees(t *testing.T) {
	root := testutil.RepoRoot()
	blocks, err := testutil.Blocks(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var readme *netconfig.Config
	for _, b := range blocks {
		if b.Kind == "kurmad-config" {
			if readme, err = netconfig.Parse([]byte(b.Text), "/etc/kurma"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if readme == nil {
		t.Fatal("README.md has no kurmad-config block")
	}
	data, err := os.ReadFile(filepath.Join(root, "examples/pod_networks.json"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := netconfig.Parse(data, filepath.Join(root, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	var conflist struct {
		Plugins []struct {
			Network any `json:"network"`
		} `json:"plugins"`
	}
	b, err := os.ReadFile(filepath.Join(root, "examples/cni/podman.conflist"))
	if err != nil || json.Unmarshal(b, &conflist) != nil || len(conflist.Plugins) == 0 {
		t.Fatalf("examples/cni/podman.conflist: %v", err)
	}
	if _, ok := readme.Network(fmt.Sprint(conflist.Plugins[0].Network)); !ok {
		t.Errorf("README's config has no network %v, which its podman snippet attaches to (its networks: %v)", conflist.Plugins[0].Network, readme.Names())
	}
	if !slices.Equal(readme.Names(), example.Names()) {
		t.Errorf("README's config has networks %v, examples/pod_networks.json %v", readme.Names(), example.Names())
	}
	install := readmeInstall(t)
	for _, n := range readme.Networks {
		if !strings.HasPrefix(n.ImageURI, "file://") || !strings.Contains(install, " "+filepath.Dir(strings.TrimPrefix(n.ImageURI, "file://"))+"/") ||
			!strings.Contains(install, filepath.Base(n.ImageURI)) {
			t.Errorf("README's network %s runs %s, where README's install copies no image:\n%s", n.Name, n.ImageURI, install)
		}
		if ex, ok := example.Network(n.Name); ok {
			if keys := netconfig.ChangedKeys(ex, n); !slices.Equal(keys, []string{"image"}) {
				t.Errorf("README's network %s differs from examples/pod_networks.json's in %v, not in its image alone", n.Name, keys)
			}
		}
	}
}

// readmeInstall is README's Install block: the indented lines after "##
// Install".
func readmeInstall(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Install\n\n")
	if !ok {
		t.Fatal("README.md has no Install section")
	}
	var lines []string
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "    ") {
			break
		}
		lines = append(lines, strings.TrimPrefix(l, "    "))
	}
	return strings.Join(lines, "\n")
}

// TestReadmeInstall runs README's install block with bash where there is
// no systemd, every command as README writes it, in a mount namespace of
// its own whose /etc, /usr/local, /opt and /var are overlays (what the
// block writes there stays in the test's dirs) and whose /run/systemd is
// empty: `make build netplugin` is the built binaries and image of this
// test run, $EDITOR writes README's config (its bridges and subnets the
// tests', its state_dir and run_dir the test's). kurmactl wait returns
// once kurmad serves and its default network runs, kurmactl finds its
// socket from the config's run_dir, net ls lists the network running,
// the completion and man pages are written; kurmad, stopped as an
// uninstall stops it (SIGUSR2), leaves nothing.
func TestReadmeInstall(t *testing.T) {
	e := newEnv(t)
	cni := testutil.Build(t, testutil.BuildOptions{}, "./cmd/kurma-cni")
	block := readmeInstall(t)
	for _, want := range []string{"make build netplugin", "$EDITOR /etc/kurma/kurmad.json", "kurmactl wait", "kurmactl net ls"} {
		if !strings.Contains(block, want) {
			t.Fatalf("README's install lacks %q:\n%s", want, block)
		}
	}
	// The repository README's install runs in: bin/, images/out, examples.
	repo := filepath.Join(e.Dir, "repo")
	for dst, src := range map[string]string{"bin/kurmad": bin("kurmad"), "bin/kurma-init": bin("kurma-init"), "bin/kurma-agent": bin("kurma-agent"), "bin/kurmactl": bin("kurmactl"),
		"bin/kurma-cni": filepath.Join(cni, "kurma-cni"), "images/out/cni-netplugin.aci": testutil.BuiltImage(t, "cni-netplugin.aci"),
		"examples/kurmad.service": filepath.Join(testutil.RepoRoot(), "examples/kurmad.service")} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, filepath.Join(repo, dst)); err != nil {
			t.Fatal(err)
		}
	}
	var conf map[string]any
	blocks, err := testutil.Blocks(filepath.Join(testutil.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Kind == "kurmad-config" {
			if err := json.Unmarshal([]byte(b.Text), &conf); err != nil {
				t.Fatal(err)
			}
		}
	}
	if conf == nil {
		t.Fatal("README.md has no kurmad-config block")
	}
	// Each network's bridge and subnet the tests'.
	for i, n := range conf["pod_networks"].([]any) {
		n := n.(map[string]any)
		plugins := []any{n}
		if ps, ok := n["plugins"].([]any); ok {
			plugins = ps
		}
		for _, p := range plugins {
			p := p.(map[string]any)
			if _, ok := p["bridge"]; ok {
				p["bridge"], p["ipam"].(map[string]any)["subnet"] = e2eBridges[i], fmt.Sprintf("10.%d.0.0/16", 204+i)
			}
		}
	}
	conf["state_dir"], conf["run_dir"] = e.StateDir, e.RunDir
	b, _ := json.Marshal(conf)
	if err := os.WriteFile(filepath.Join(e.Dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	editor := filepath.Join(e.Dir, "editor")
	if err := os.WriteFile(editor, []byte("#!/bin/sh\ncp "+filepath.Join(e.Dir, "config.json")+" \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, d := range []string{"etc", "usr/local", "opt", "var"} {
		up, work := filepath.Join(e.Dir, "upper", d), filepath.Join(e.Dir, "work", d)
		mounts = append(mounts, fmt.Sprintf("mkdir -p %s %s && mount -t overlay overlay -o lowerdir=/%s,upperdir=%s,workdir=%s /%s", up, work, d, up, work, d))
	}
	mounts = append(mounts, "if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd; fi")
	script := strings.Join(mounts, "\n") + "\ncd " + repo + "\n" + strings.Replace(block, "make build netplugin", ":", 1)

	t.Cleanup(func() { stopByCwd(t, repo) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "EDITOR="+editor, "KURMA_SOCKET=", "PATH=/usr/local/bin:"+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("README's install failed: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, &stdout, &stderr)
	}
	// kurmactl wait returned once mynet ran: net ls, right after, says so.
	if !regexp.MustCompile(`(?m)^mynet +1 +running `).MatchString(stdout.String()) {
		t.Errorf("kurmactl net ls after the install:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	for _, f := range []string{"etc/bash_completion.d/kurmactl", "usr/local/share/man/man1/kurmactl.1", "usr/local/bin/kurmad", "usr/local/bin/kurma-init", "opt/cni/bin/kurma-cni", "var/lib/kurma/cni-netplugin.aci"} {
		if _, err := os.Stat(filepath.Join(e.Dir, "upper", f)); err != nil {
			t.Errorf("the install did not write /%s: %v", f, err)
		}
	}
	stopByCwd(t, repo)
	e.checkCleanStopped()
}

// stopByCwd stops the kurmad whose working directory is dir (the one
// README's install started with setsid), its plugin containers with it
// (SIGUSR2, as kurmactl uninstall stops it: SIGTERM would leave them
// running), and waits for it to exit.
func stopByCwd(t *testing.T, dir string) {
	t.Helper()
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		comm, _ := os.ReadFile(filepath.Join(p, "comm"))
		cwd, _ := os.Readlink(filepath.Join(p, "cwd"))
		if strings.TrimSpace(string(comm)) != "kurmad" || cwd != dir {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
			continue
		}
		testutil.WaitFor(t, 30*time.Second, "kurmad to exit", func() error {
			// Gone, or a zombie its new parent has yet to reap.
			if st, err := os.ReadFile(filepath.Join(p, "stat")); err == nil && !regexp.MustCompile(`\) Z `).Match(st) {
				return fmt.Errorf("pid %d runs", pid)
			}
			return nil
		})
	}
}

// TestUnitWaitsForTheNetworks: examples/kurmad.service has systemd run
// kurmactl wait after kurmad's READY=1, so that the unit is started once
// its default network runs: run as the unit writes it, it waits while the
// network's image is not there yet (kurmad serves, the network retries
// its fetch), and once it returned a pod is created at once.
func TestUnitWaitsForTheNetworks(t *testing.T) {
	e := newEnv(t)
	unit, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "examples/kurmad.service"))
	if err != nil {
		t.Fatal(err)
	}
	var post []string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStartPost="); ok {
			post = strings.Fields(strings.TrimPrefix(v, "-"))
		}
	}
	if len(post) < 2 || post[0] != "/usr/local/bin/kurmactl" || !slices.Contains(post, "wait") {
		t.Fatalf("examples/kurmad.service runs no kurmactl wait after kurmad started: ExecStartPost %q", post)
	}
	late := filepath.Join(e.Dir, "late.aci")
	a := bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "", true)
	a.Image = "file://" + late
	e.writeConfig([]netDef{a}, nil)
	e.start()

	args := post[1:]
	for i, arg := range args {
		if arg == "--config" && i+1 < len(args) && args[i+1] == "/etc/kurma/kurmad.json" {
			// The harness's kurmad listens on a socket of the test's.
			args[i], args[i+1] = "--socket", e.Socket
		}
	}
	cmd := exec.Command(bin("kurmactl"), args...)
	cmd.Env = append(os.Environ(), "KURMA_SOCKET=")
	stderr, done := testutil.StartUntil(t, cmd, "waiting for network a (", 30*time.Second)
	select {
	case err := <-done:
		t.Fatalf("kurmactl wait returned (%v) while network a had no image:\n%s", err, stderr)
	default:
	}
	b, err := os.ReadFile(testImage())
	if err != nil {
		t.Fatal(err)
	}
	// Whole or not at all: a fetch may look at any time.
	if err := os.WriteFile(late+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(late+".tmp", late); err != nil {
		t.Fatal(err)
	}
	e.mustCtl("net", "retry", "a") // rather than wait for the fetch's next try
	select {
	case err := <-done:
		if err != nil || !strings.Contains(stderr.String(), "ready: kurmad serves and network a runs") {
			t.Fatalf("kurmactl wait: %v\n%s", err, stderr)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("kurmactl wait did not return once a ran:\n%s", stderr)
	}
	p := e.createPod()
	e.mustCtl("pod", "rm", p.ID)
	e.stop()
	e.checkCleanStopped()
}

// TestSystemdNotify: kurmad under a Type=notify unit (NOTIFY_SOCKET) sends
// READY=1, and its API answers when it does: systemctl start returns only
// once kurmactl can reach it.
func TestSystemdNotify(t *testing.T) {
	e := newEnv(t)
	e.writeConfig([]netDef{bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "", true)}, nil)
	sock := filepath.Join(e.Dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type answer struct {
		msg string
		err error
	}
	got := make(chan answer, 1)
	go func() {
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil {
			got <- answer{err: err}
			return
		}
		// Right when systemd would consider kurmad started.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = e.Client.Info(ctx)
		got <- answer{string(buf[:n]), err}
	}()
	e.start("NOTIFY_SOCKET=" + sock)
	select {
	case a := <-got:
		if a.msg != "READY=1" || a.err != nil {
			t.Errorf("notification %q; the API when it came: %v", a.msg, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("kurmad sent systemd no READY=1")
	}
	e.stop()
	e.checkCleanStopped()
}
