package podnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	current "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/state"
)

// ResolvConfPath is where a pod's resolv.conf is written.
func (m *Manager) ResolvConfPath(id string) string {
	return filepath.Join(m.podDir(id), "resolv.conf")
}

// writeHostResolvConf makes the pod's dir and copies the host's
// resolv.conf into it: what a pod gets when no result has DNS (an empty
// file would leave it without any resolver). prepare does it before the
// adds, beside the commit of the pod's intent.
func (m *Manager) writeHostResolvConf(id string) error {
	data, err := os.ReadFile(m.opts.HostResolvConf)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("resolv.conf: read host's: %w", err)
	}
	if err := os.Mkdir(m.podDir(id), 0o755); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	return m.putResolvConf(id, data)
}

// writeResolvConf replaces the host's copy with res's DNS section, when a
// result had DNS (res not nil). A runtime's pod has no resolv.conf of
// kurmad's: the runtime writes the container's own from the DNS of the
// result kurma-cni returns, and nothing reads a copy here.
func (m *Manager) writeResolvConf(rec *state.Pod, res *current.Result) error {
	if res == nil || rec.Runtime != nil {
		return nil
	}
	return m.putResolvConf(rec.ID, []byte(renderResolvConf(res)))
}

// putResolvConf writes the pod's resolv.conf in place, not through a
// temporary file and a rename: nothing reads it before the pod is ready
// (Create has not returned it), and a create that dies half-way is rolled
// back with its dir.
func (m *Manager) putResolvConf(id string, data []byte) error {
	if err := os.WriteFile(m.ResolvConfPath(id), data, 0o644); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	return nil
}

// removePodDir removes the pod's dir: its resolv.conf, then the dir, two
// syscalls; a dir that holds anything else (or is not a dir) goes through
// RemoveAll.
func (m *Manager) removePodDir(id string) error {
	dir := m.podDir(id)
	err := unix.Unlink(m.ResolvConfPath(id))
	if err == nil || errors.Is(err, unix.ENOENT) {
		err = unix.Rmdir(dir)
	}
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("pod dir: %w", err)
	}
	return nil
}

func renderResolvConf(res *current.Result) string {
	var b strings.Builder
	d := res.DNS
	if d.Domain != "" {
		fmt.Fprintf(&b, "domain %s\n", d.Domain)
	}
	if len(d.Search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(d.Search, " "))
	}
	for _, ns := range d.Nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if len(d.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(d.Options, " "))
	}
	return b.String()
}
