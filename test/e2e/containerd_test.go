package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kurma-project/kurma/internal/testutil"
)

// containerd is a private containerd 1.6 daemon (Debian's) on the test's
// own root, state and socket, without its CRI plugin.
type containerd struct {
	t      *testing.T
	dir    string
	socket string
}

func newContainerd(t *testing.T) *containerd {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Fatal("containerd is not installed (make test installs it)")
	}
	dir, err := os.MkdirTemp("", "ktrt-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{t: t, dir: dir, socket: filepath.Join(dir, "c.sock")}
	// The shims' socket dir is fixed in containerd 1.6; runc's root and the
	// fifos are ours (ctr run --runc-root, --fifo-dir).
	removeIfNew(t, "/run/containerd", "/run/containerd/s")
	t.Cleanup(func() { removeCgroups(t, "ktrt") })
	conf := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.socket)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("containerd log:\n%s", b)
		}
		testutil.UnmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "containerd to serve", func() error {
		_, err := c.ctr("version")
		return err
	})
	return c
}

// ctr runs ctr on this daemon, in namespace ktrt.
func (c *containerd) ctr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.socket, "-n", "ktrt"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// importBusybox writes a one-layer image of the busybox rootfs at root as a
// docker archive and imports it as ref.
func (c *containerd) importBusybox(t *testing.T, root, ref string) {
	t.Helper()
	var layerTar bytes.Buffer
	if err := tarDir(&layerTar, root); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.DockerManifestSchema2), layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Config.Cmd = "linux", "amd64", []string{"/bin/sh"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(c.dir, "image.tar")
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatal(err)
	}
	if out, err := c.ctr("image", "import", "--snapshotter", "native", file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// tarDir writes the tree at root as a tar stream (files, dirs, symlinks).
func tarDir(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// installCNI puts kurma-cni (as a type of its own, so no installed plugin
// is touched) and a first-sorting conflist into the host's CNI dirs, which ctr run --cni always reads, and
// removes exactly what it put there when the test ends.
func installCNI(t *testing.T, r *rtEnv, cniNet string) {
	t.Helper()
	const binDir, confDir = "/opt/cni/bin", "/etc/cni/net.d"
	forgetCNICache(t, cniNet)
	var made []string // created, removed in reverse
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if err := os.Remove(made[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("removing %s: %v", made[i], err)
			}
		}
	})
	for _, d := range []string{"/opt/cni", binDir, "/etc/cni", confDir} {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			made = append(made, d)
		}
	}
	put := func(dst string, write func()) {
		if _, err := os.Lstat(dst); err == nil {
			t.Fatalf("%s exists already: not replacing what the host has", dst)
		}
		made = append(made, dst)
		write()
	}
	typ := "kurma-cni-" + cniNet
	put(filepath.Join(binDir, typ), func() { testutil.CopyExecutable(t, filepath.Join(r.cniBin, "kurma-cni"), filepath.Join(binDir, typ)) })
	// examples/cni's: containerd 1.6 ignores its cniVersions and runs 1.0.0.
	conf := r.exampleConflist(t, "containerd", cniNet, map[string]any{"type": typ})
	dst := filepath.Join(confDir, "00-"+cniNet+".conflist")
	put(dst, func() {
		if err := os.WriteFile(dst, conf, 0o644); err != nil {
			t.Fatal(err)
		}
	})
}

// TestContainerd: containerd's ctr run --cni (go-cni over libcni, the
// container's /proc/<pid>/ns/net as netns) attaches a busybox container
// through kurma-cni: it sees its address from rtnet, kurmad lists the pod
// as ctr's while it runs, and when the task exits ctr's DEL leaves nothing
// (kurmad's bind mount kept the namespace reachable after its process
// died).
func TestContainerd(t *testing.T) {
	r := newRuntimeEnv(t)
	const cniNet = "ktrtctd"
	installCNI(t, r, cniNet)
	c := newContainerd(t)
	const ref = "kurma.test/busybox:e2e"
	c.importBusybox(t, busyboxRootfs(t, "ctr"), ref)

	task := c.runTask(t, ref, "ktrt-ctr1")
	if !strings.Contains(task.seen, "inet 10.217.") {
		task.finish()
		t.Fatalf("the container's eth0:\n%s\nctr stderr: %s", task.seen, task.stderr.String())
	}
	pods := r.listPods()
	if len(pods) != 1 || pods[0].Runtime == nil || pods[0].Runtime.Owner != "ctr" || !strings.HasPrefix(pods[0].Runtime.Netns, "/proc/") {
		t.Errorf("kurmad's pods while the task runs: %+v, want ctr's in /proc/<pid>/ns/net", pods)
	}
	if err := task.finish(); err != nil {
		t.Fatalf("ctr run: %v\n%s", err, task.stderr.String())
	}
	r.checkNoPods(t)
}

// ctrTask is `ctr run --rm --cni` of a busybox shell that prints its eth0,
// then "ready", and exits on a line on its stdin.
type ctrTask struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	seen   string // what it printed before "ready"
	cancel context.CancelFunc
}

// runTask starts the task and returns once it printed "ready".
func (c *containerd) runTask(t *testing.T, ref, id string) *ctrTask {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, "ctr", "--address", c.socket, "-n", "ktrt", "run", "--rm", "--cni", "--snapshotter", "native",
		"--runc-root", filepath.Join(c.dir, "runc"), "--fifo-dir", filepath.Join(c.dir, "fifo"), ref, id, "/bin/sh", "-c", "ip -4 addr show eth0; echo ready; read line")
	task := &ctrTask{cmd: cmd, stderr: &bytes.Buffer{}, cancel: cancel}
	t.Cleanup(func() { _ = task.finish() })
	var err error
	if task.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = task.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		seen.WriteString(sc.Text() + "\n")
	}
	task.seen = seen.String()
	return task
}

// finish ends the task (a line on its stdin) and waits for ctr, which
// runs the CNI DEL and removes the container; again is a no-op.
func (task *ctrTask) finish() error {
	if task.cmd.ProcessState != nil {
		return nil
	}
	fmt.Fprintln(task.stdin)
	task.stdin.Close()
	err := task.cmd.Wait()
	task.cancel()
	return err
}

// TestContainerdDropped: kurmad stopped while a `ctr run --rm --cni` task
// ends: ctr's DEL fails with kurma-cni's "try again later", which go-cni
// hands ctr (its "not found" matching does not swallow it), and ctr
// removes the container anyway; kurmad started: within the check interval
// the pod, its veth and its lease are gone, released through the plugins'
// del while kurmad's bind mount held the namespace.
func TestContainerdDropped(t *testing.T) {
	f := newFaultEnv(t)
	const cniNet = "ktrtctddrop"
	installCNI(t, f.rtEnv, cniNet)
	c := newContainerd(t)
	const ref = "kurma.test/busybox:e2e"
	c.importBusybox(t, busyboxRootfs(t, "ctr"), ref)
	task := c.runTask(t, ref, "ktrt-ctrdrop")
	if pods := f.listPods(); len(pods) != 1 || pods[0].Runtime == nil || pods[0].Runtime.Owner != "ctr" {
		t.Fatalf("kurmad's pods while the task runs: %+v, want ctr's", pods)
	}

	f.stop()
	if err := task.finish(); err != nil {
		t.Logf("ctr run with kurmad stopped: %v", err)
	}
	if msg := task.stderr.String(); !strings.Contains(msg, "network review") || !strings.Contains(msg, "kurma-cni") {
		t.Errorf("ctr's stderr does not show the DEL's failure (swallowed?):\n%s", msg)
	}
	if out, err := c.ctr("containers", "ls", "-q"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("containerd still has containers %q (%v)", out, err)
	}

	f.start()
	f.waitReleased(t, 0)
	if got := f.counter(t, `kurma_runtime_pods_dropped_total{reason="netns_gone"}`); got != 1 {
		t.Errorf("releases counted: %v, want 1", got)
	}
}

// forgetCNICache removes, when the test ends, what a runtime's libcni kept
// in its cache (/var/lib/cni/results) for the CNI networks names: a DEL
// that failed (kurmad away) leaves the ADD's entry there for good. That is
// the runtime's state, not kurmad's, and must not outlive the test; the
// cache dirs go too when the test made them.
func forgetCNICache(t *testing.T, names ...string) {
	t.Helper()
	const cacheDir = "/var/lib/cni"
	results := filepath.Join(cacheDir, "results")
	removeIfNew(t, cacheDir, results)
	t.Cleanup(func() {
		for _, n := range names {
			entries, _ := filepath.Glob(filepath.Join(results, n+"-*"))
			for _, e := range entries {
				if err := os.Remove(e); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("libcni cache entry %s: %v", e, err)
				}
			}
		}
	})
}

// removeIfNew removes, when the test ends, those of dirs (parents first)
// that do not exist now and are empty then.
func removeIfNew(t *testing.T, dirs ...string) {
	t.Helper()
	var fresh []string
	for _, d := range dirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			fresh = append(fresh, d)
		}
	}
	t.Cleanup(func() {
		for i := len(fresh) - 1; i >= 0; i-- {
			_ = os.Remove(fresh[i])
		}
	})
}

// removeCgroups removes the (empty) cgroup directory name that containerd
// makes in every hierarchy for a namespace.
func removeCgroups(t *testing.T, name string) {
	t.Helper()
	for _, h := range testutil.CgroupHierarchies() {
		if err := os.Remove(filepath.Join(h, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s: %v", filepath.Join(h, name), err)
		}
	}
}
