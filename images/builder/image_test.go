package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
)

// TestImageRunsChrooted unpacks the built ACI and runs its programs chrooted
// into the rootfs with no environment at all: the binaries must be static and
// the defaults (CNI_PATH /opt/cni/bin, cache and leases under /var/lib/cni)
// must work as they will inside a plugin container.
func TestImageRunsChrooted(t *testing.T) {
	testutil.RequireRoot(t)
	res := shared(t)
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	unpackACI(t, res.ACIPath, rootfs)
	procDir := filepath.Join(rootfs, "proc")
	if err := unix.Mount("proc", procDir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(procDir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", procDir, err)
		}
	})
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("kt-wrap0"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	testutil.NewNetnsFile(t, filepath.Join(rootfs, "run", "ktwimg0"))

	conf := []byte(`{"cniVersion":"1.0.0","name":"ktwimage","type":"bridge","bridge":"kt-wrap0","isGateway":true,
		"ipam":{"type":"host-local","subnet":"10.201.0.0/16"}}`)
	chrooted := func(path string, args ...string) *exec.Cmd {
		cmd := exec.Command(path, args...)
		cmd.Env = []string{}
		cmd.Dir = "/"
		cmd.Stdin = bytes.NewReader(conf)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
		return cmd
	}
	run := func(path string, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := chrooted(path, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %v: %v\nstdout: %s\nstderr: %s", path, args, err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}

	// The main executable checks the plugins, says ready and waits for
	// SIGTERM.
	setup := chrooted(Entrypoint)
	setupErr, done := testutil.StartUntil(t, setup, "ready", 30*time.Second)
	if err := setup.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("setup is not running: %v", err)
	}
	if err := <-done; err != nil || !strings.Contains(setupErr.String(), "stopping") {
		t.Fatalf("setup after SIGTERM: %v\n%s", err, setupErr.String())
	}

	out := run("/opt/network/add", "/run/ktwimg0", "ktwimage-pod", "eth0")
	var result struct {
		IPs []struct{ Address string }
	}
	if err := json.Unmarshal([]byte(out), &result); err != nil || len(result.IPs) == 0 {
		t.Fatalf("add result %q: %v", out, err)
	}
	ip := strings.Split(result.IPs[0].Address, "/")[0]
	lease := filepath.Join(rootfs, "var/lib/cni/networks/ktwimage", ip)
	if _, err := os.Stat(lease); err != nil {
		t.Errorf("no host-local lease under the image's /var/lib/cni: %v", err)
	}
	run("/opt/network/check", "/run/ktwimg0", "ktwimage-pod", "eth0")
	run("/opt/network/del", "/run/ktwimg0", "ktwimage-pod", "eth0")
	if _, err := os.Stat(lease); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease %s not released: %v", ip, err)
	}
}

// unpackACI extracts the rootfs of an ACI (dirs, files, hard links) into dir.
func unpackACI(t *testing.T, aciPath, dir string) {
	t.Helper()
	f, err := os.Open(aciPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name, ok := strings.CutPrefix(strings.TrimSuffix(h.Name, "/"), "rootfs")
		if !ok {
			continue
		}
		dst := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
			if err == nil {
				err = os.Chmod(dst, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
			}
		case tar.TypeReg:
			var out *os.File
			out, err = os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(h.Mode&0o777))
			if err == nil {
				_, err = io.Copy(out, tr)
				out.Close()
			}
		case tar.TypeLink:
			target := strings.TrimPrefix(h.Linkname, "rootfs")
			err = os.Link(filepath.Join(dir, target), dst)
		default:
			err = fmt.Errorf("unexpected type %c", h.Typeflag)
		}
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
	}
}

func modeBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

// TestHostTools copies a dynamically linked host program (ip, which
// `make deps` installs) with its libraries and runs it chrooted in the
// unpacked image.
func TestHostTools(t *testing.T) {
	testutil.RequireRoot(t)
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		t.Fatalf("ip (iproute2) is needed: %v", err)
	}
	if ipPath, err = filepath.Abs(ipPath); err != nil {
		t.Fatal(err)
	}
	res, err := Build(context.Background(), Options{OutDir: t.TempDir(), BinDir: compiled(t), SkipCompile: true, HostTools: []string{"ip"}})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	unpackACI(t, res.ACIPath, rootfs)
	cmd := exec.Command(ipPath, "-V") // the same path inside the image
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "iproute2") {
		t.Fatalf("chrooted ip -V: %v\n%s", err, out)
	}
}
