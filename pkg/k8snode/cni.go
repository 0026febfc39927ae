package k8snode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/kurma-project/kurma/pkg/kurmacni"
)

// CNI is kurma-cni as installed on the node: its binary in the runtime's
// CNI bin dir and its conflist in the runtime's CNI config dir (the
// container's mounts of the host's /opt/cni/bin and /etc/cni/net.d).
type CNI struct {
	// Binary is kurma-cni in the image.
	Binary string
	// Conflist is the conflist to install.
	Conflist []byte
	// BinDir and ConfDir are the node's CNI dirs as mounted.
	BinDir, ConfDir string
	// ConflistName is the conflist's file name in ConfDir; runtimes use
	// the first in name order.
	ConflistName string
}

// conflistPath and binaryPath are where the conflist and kurma-cni go on
// the node (as mounted).
func (c *CNI) conflistPath() string { return filepath.Join(c.ConfDir, c.ConflistName) }
func (c *CNI) binaryPath() string   { return filepath.Join(c.BinDir, kurmacni.Type) }

// Install puts the binary, then the conflist, in place, each written
// beside its final name and renamed over it: a runtime never reads half a
// file, and never a conflist whose plugin is missing. It replaces what an
// earlier kurma-node installed.
func (c *CNI) Install() error {
	bin, err := os.Open(c.Binary)
	if err != nil {
		return fmt.Errorf("kurma-cni: %w", err)
	}
	defer bin.Close()
	if err := writeAtomic(c.binaryPath(), bin, 0o755); err != nil {
		return err
	}
	return writeAtomic(c.conflistPath(), bytes.NewReader(c.Conflist), 0o644)
}

// Uninstall removes the conflist, then the binary; what is missing
// already is no error.
func (c *CNI) Uninstall() error {
	var errs []error
	for _, p := range []string{c.conflistPath(), c.binaryPath()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Installed reports whether the conflist in ConfDir is this one.
func (c *CNI) Installed() bool {
	b, err := os.ReadFile(c.conflistPath())
	return err == nil && bytes.Equal(b, c.Conflist)
}

// present reports whether a conflist of ConflistName is in ConfDir and
// kurma-cni in BinDir, whatever their content.
func (c *CNI) present() bool {
	for _, p := range []string{c.conflistPath(), c.binaryPath()} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func writeAtomic(dst string, r io.Reader, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".")
	if err != nil {
		return fmt.Errorf("installing %s: %w", dst, err)
	}
	_, err = io.Copy(tmp, r)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("installing %s: %w", dst, err)
	}
	return nil
}

// Status is CNI's STATUS of the conflist's kurma-cni entry, as a runtime
// would call it: nil when kurmad answers and every network the entry names
// has a running generation; otherwise a CNI error (code 50) naming the
// network and its state, or kurmad's socket.
func Status(conflist []byte) error {
	stdin, err := pluginConf(conflist)
	if err != nil {
		return err
	}
	return (&kurmacni.Plugin{Stdout: io.Discard}).Status(&skel.CmdArgs{StdinData: stdin})
}

// pluginConf is the stdin libcni gives the conflist's kurma-cni entry: the
// entry with the list's name and cniVersion.
func pluginConf(conflist []byte) ([]byte, error) {
	var list struct {
		Name       string            `json:"name"`
		CNIVersion string            `json:"cniVersion"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &list); err != nil {
		return nil, fmt.Errorf("the conflist: %w", err)
	}
	for _, raw := range list.Plugins {
		var entry map[string]any
		if err := json.Unmarshal(raw, &entry); err != nil {
			return nil, fmt.Errorf("the conflist: %w", err)
		}
		if entry["type"] == kurmacni.Type {
			entry["name"], entry["cniVersion"] = list.Name, list.CNIVersion
			return json.Marshal(entry)
		}
	}
	return nil, fmt.Errorf("the conflist %q has no %s entry", list.Name, kurmacni.Type)
}
