package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// newPodman is a podman on a private config (testutil.Podman) whose CNI
// plugins are the runtime env's and whose networks are conflists; every
// container it made goes when the test ends.
func newPodman(t *testing.T, cniBin string, conflists map[string][]byte) *testutil.Podman {
	t.Helper()
	dir, err := os.MkdirTemp("", "ktrt-podman-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := testutil.NewPodman(dir, cniBin, conflists)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := p.Cleanup(ctx); err != nil {
			t.Errorf("podman cleanup: %v", err)
		}
	})
	return p
}

func mustPodman(t *testing.T, p *testutil.Podman, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := p.Run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// busyboxRootfs is a busybox root filesystem serving text at
// /www/index.html (testutil.BusyboxRootfs).
func busyboxRootfs(t *testing.T, text string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := testutil.BusyboxRootfs(root, text); err != nil {
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
	id := mustPodman(t, pm, "run", "-d", "--name", name, "--network", cniNet, "-p", fmt.Sprintf("%d:80", port), "--ip", "10.217.9.9",
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
	if err := json.Unmarshal([]byte(mustPodman(t, pm, "inspect", name)), &inspect); err != nil || len(inspect) != 1 ||
		inspect[0].NetworkSettings.Networks[cniNet].IPAddress != "10.217.9.9" {
		t.Errorf("podman inspect: %+v (%v), want the address kurma-cni returned", inspect, err)
	}

	mustPodman(t, pm, "rm", "-f", "-t", "0", name)
	r.checkNoPods(t)
	if portRule(t, port) {
		t.Errorf("a rule for port %d is left after podman rm", port)
	}
}
