package podnet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// ResolvConfPath is where a pod's resolv.conf is written.
func (m *Manager) ResolvConfPath(id string) string {
	return filepath.Join(m.podDir(id), "resolv.conf")
}

// writeResolvConf writes the pod's resolv.conf from res's DNS section, or
// copies the host's when res is nil (no result had DNS: an empty file would
// leave the pod without any resolver).
func (m *Manager) writeResolvConf(id string, res *current.Result) error {
	var data []byte
	if res != nil {
		data = []byte(renderResolvConf(res))
	} else {
		b, err := os.ReadFile(m.opts.HostResolvConf)
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("resolv.conf: read host's: %w", err)
		}
		data = b
	}
	dir := m.podDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	tmp := filepath.Join(dir, ".resolv.conf.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	if err := os.Rename(tmp, m.ResolvConfPath(id)); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
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
