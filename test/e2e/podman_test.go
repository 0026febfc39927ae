package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// podman is Debian's podman 4.3 with its CNI backend on a private config:
// runc and cgroupfs (crun refuses this host's hybrid cgroup layout), no
// default rlimits (raising them needs CAP_SYS_RESOURCE, which this host
// lacks), vfs storage, and CNI dirs of the test's own, so nothing of the
// host's podman setup is read or written.
type podman struct {
	t   *testing.T
	dir string
	env []string
}

func newPodman(t *testing.T, cniBin string, conflists map[string][]byte) *podman {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed (make test installs it)")
	}
	dir, err := os.MkdirTemp("", "ktrt-podman-")
	if err != nil {
		t.Fatal(err)
	}
	p := &podman{t: t, dir: dir}
	netd := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range conflists {
		if err := os.WriteFile(filepath.Join(netd, name+".conflist"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
events_logfile_path = %q
tmp_dir = %q
[network]
network_backend = "cni"
cni_plugin_dirs = [%q]
network_config_dir = %q
`, filepath.Join(dir, "events.log"), filepath.Join(dir, "tmp"), cniBin, netd)
	storage := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "store"), filepath.Join(dir, "runroot"))
	for name, data := range map[string]string{"containers.conf": conf, "storage.conf": storage} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"))
	t.Cleanup(func() {
		out, _ := p.run("ps", "-aq")
		for _, id := range strings.Fields(out) {
			if _, err := p.run("rm", "-f", id); err != nil {
				t.Errorf("podman rm -f %s: %v", id, err)
			}
		}
		testutil.UnmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return p
}

func (p *podman) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = p.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (p *podman) mustRun(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// busyboxRootfs is a root filesystem of busybox alone (with the applets a
// test runs linked) serving text at /www/index.html.
func busyboxRootfs(t *testing.T, text string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "www", "proc", "sys", "dev", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testutil.CopyExecutable(t, busybox(t), filepath.Join(root, "bin", "busybox"))
	for _, applet := range []string{"sh", "httpd", "ip", "sleep", "cat", "wget"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "www", "index.html"), []byte(text+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestPodman: podman runs a busybox container on a kurma-cni network with
// -p HOSTPORT:80 and --ip; the host reaches its httpd on 127.0.0.1:HOSTPORT
// (portMappings went from podman through kurma-cni and kurmad into the
// image's portmap); kurmad lists the pod as podman's, with the address
// asked for (podman's CNI_ARGS IP=, handed on to host-local); podman rm -f
// leaves no pod in kurmad, no veth, no IP lease and no portmap rule.
func TestPodman(t *testing.T) {
	r := newRuntimeEnv(t)
	const cniNet = "ktrtpodman"
	pm := newPodman(t, r.cniBin, map[string][]byte{cniNet: r.conflist("1.0.0", cniNet)})
	root := busyboxRootfs(t, "served through kurma")
	port := freePort(t)
	name := fmt.Sprintf("ktrt-web-%d", port)
	id := pm.mustRun("run", "-d", "--name", name, "--network", cniNet, "-p", fmt.Sprintf("%d:80", port), "--ip", "10.217.9.9",
		"--rootfs", root, "/bin/httpd", "-f", "-p", "80", "-h", "/www")
	getPage(t, port, "served through kurma")

	pods := r.listPods()
	if len(pods) != 1 || pods[0].Runtime == nil || pods[0].Runtime.Owner != "podman" || pods[0].Runtime.ContainerID != id || pods[0].Name != name {
		t.Fatalf("kurmad's pods %+v, want podman's %s named %s", pods, id, name)
	}
	if ips := podIPs(t, &pods[0]); ips[rtNetwork] != "10.217.9.9" {
		t.Errorf("address %s, want --ip's 10.217.9.9", ips[rtNetwork])
	}
	if out := r.mustCtl("pod", "ls"); !strings.Contains(out, "podman/"+id[:12]) {
		t.Errorf("pod ls lacks podman/%s:\n%s", id[:12], out)
	}
	var inspect []struct {
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress string }
		}
	}
	if err := json.Unmarshal([]byte(pm.mustRun("inspect", name)), &inspect); err != nil || len(inspect) != 1 ||
		inspect[0].NetworkSettings.Networks[cniNet].IPAddress != "10.217.9.9" {
		t.Errorf("podman inspect: %+v (%v), want the address kurma-cni returned", inspect, err)
	}

	pm.mustRun("rm", "-f", name)
	r.checkNoPods(t)
	if portRule(t, port) {
		t.Errorf("a rule for port %d is left after podman rm", port)
	}
}
