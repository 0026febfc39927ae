package testutil

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Podman is Debian's podman 4.3 with its CNI backend on a private config,
// for the end-to-end tests and the bench: runc and cgroupfs (crun refuses
// a hybrid cgroup layout), no default rlimits (raising them needs
// CAP_SYS_RESOURCE, which such hosts may lack), vfs storage, and CNI plugin
// and config dirs of the caller's, so nothing of the host's podman setup
// is read or written (but libcni's cache, /var/lib/cni, which its DEL
// empties again).
type Podman struct {
	Dir string   // config, storage, state: everything of this podman
	Env []string // the environment every podman command gets
}

// NewPodman makes a podman on dir (created) whose CNI plugins are in
// cniBin and whose networks are conflists, network name → conflist.
func NewPodman(dir, cniBin string, conflists map[string][]byte) (*Podman, error) {
	if _, err := exec.LookPath("podman"); err != nil {
		return nil, errors.New("podman is not installed (make test and make bench install it)")
	}
	netd := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(netd, 0o755); err != nil {
		return nil, err
	}
	for name, b := range conflists {
		if err := os.WriteFile(filepath.Join(netd, name+".conflist"), b, 0o644); err != nil {
			return nil, err
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
			return nil, err
		}
	}
	return &Podman{Dir: dir, Env: append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"))}, nil
}

// Run runs podman with args and returns its stdout, trimmed; the error
// holds both outputs.
func (p *Podman) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = p.Env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Cleanup removes every container of this podman (podman rm -f: their CNI
// DEL runs), unmounts what is left under Dir and removes it.
func (p *Podman) Cleanup(ctx context.Context) error {
	var errs []error
	out, err := p.Run(ctx, "ps", "-aq")
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range strings.Fields(out) {
		if _, err := p.Run(ctx, "rm", "-f", "-t", "0", id); err != nil {
			errs = append(errs, err)
		}
	}
	UnmountUnder(p.Dir)
	if err := os.RemoveAll(p.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StaticBusybox is the host's busybox binary, which must be static
// (busybox-static) to run alone in a root filesystem.
func StaticBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				return "", fmt.Errorf("%s is dynamically linked: install busybox-static", p)
			}
		}
		return p, nil
	}
	return "", errors.New("busybox is not installed (make test and make bench install busybox-static)")
}

// BusyboxRootfs writes at root (created) a root filesystem of the static
// busybox alone, with the applets sh, httpd, ip, sleep, cat and wget linked,
// and /www/index.html saying text.
func BusyboxRootfs(root, text string) error {
	bb, err := StaticBusybox()
	if err != nil {
		return err
	}
	for _, d := range []string{"bin", "www", "proc", "sys", "dev", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	for _, applet := range []string{"sh", "httpd", "ip", "sleep", "cat", "wget"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(root, "www", "index.html"), []byte(text+"\n"), 0o644)
}
