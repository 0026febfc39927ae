package builder

import (
	"archive/tar"
	"bufio"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Manifest returns the image manifest of the cni-netplugin ACI for arch (a
// GOARCH; "" = the build host's).
func Manifest(arch string) (*schema.ImageManifest, error) {
	arch, err := imageArch(arch)
	if err != nil {
		return nil, err
	}
	return cniNetplugin.manifest(arch)
}

// manifest returns the ACI image manifest of the plugin image id for arch.
func (id identity) manifest(arch string) (*schema.ImageManifest, error) {
	name, err := types.NewACIdentifier(id.name)
	if err != nil {
		return nil, err
	}
	labels, err := types.LabelsFromMap(map[types.ACIdentifier]string{
		"version": id.version,
		"os":      OS,
		"arch":    appcArch(arch),
	})
	if err != nil {
		return nil, err
	}
	m := schema.BlankImageManifest()
	m.Name = *name
	m.Labels = labels
	m.App = &types.App{Exec: types.Exec(id.mainExec()), User: "0", Group: "0"}
	for _, kv := range id.environment() {
		k, v, _ := strings.Cut(kv, "=")
		m.App.Environment.Set(k, v)
	}
	if !id.notWrapper {
		m.Annotations.Set("kurma.dev/cni-plugins", pluginsModule+"@"+PluginsVersion)
		// /opt/network/<verb> are cni-wrapper of this protocol
		// version: kurma-agent may run them in-process (see package cniwrap).
		m.Annotations.Set(netplugin.WrapperAnnotationACI, netplugin.WrapperVersion)
	}
	for _, k := range sortedKeys(id.annotations) {
		m.Annotations.Set(types.ACIdentifier(k), id.annotations[k])
	}
	return m, nil
}

// writeACI writes the ACI of the plugin image id for arch to dst, a plain tar, and
// returns its image ID. Not gzip'd: kurma's own image carries it in a
// compressed layer already, and a compressed ACI is decompressed twice by
// the first kurmad that fetches it (to check it, then to unpack it), which
// on this project's machines was 0.6 s of a 3-network cold boot.
func (id identity) writeACI(dst string, fs []entry, arch string) (string, error) {
	m, err := id.manifest(arch)
	if err != nil {
		return "", err
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	pre := []entry{
		{path: "manifest", mode: 0o644, typ: tar.TypeReg, data: mb},
		{path: "rootfs", mode: 0o755, typ: tar.TypeDir},
	}
	sum := sha512.New()
	err = writeFileAtomic(dst, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := writeTar(io.MultiWriter(bw, sum), "", pre, prefixed("rootfs/", fs)); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return "", err
	}
	return "sha512-" + hex.EncodeToString(sum.Sum(nil)), nil
}

// prefixed returns es with prefix before every path and link target.
func prefixed(prefix string, es []entry) []entry {
	out := make([]entry, len(es))
	for i, e := range es {
		e.path = prefix + e.path
		if e.link != "" {
			e.link = prefix + e.link
		}
		out[i] = e
	}
	return out
}

// writeFileAtomic writes dst through a temporary file in the same directory
// renamed into place, so a reader never sees half an image and a failed
// build leaves nothing behind.
func writeFileAtomic(dst string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	return nil
}
