package builder

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// OCI annotation and label keys used on the image.
const (
	annotationRefName = "org.opencontainers.image.ref.name"
	labelTitle        = "org.opencontainers.image.title"
	labelVersion      = "org.opencontainers.image.version"
)

// writeOCI writes the OCI image layout at dir (replacing any previous one)
// and returns the manifest digest.
func writeOCI(dir string, files []entry) (string, error) {
	img, err := ociImage(files)
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	if err := replaceLayout(dir, img); err != nil {
		return "", err
	}
	return digest.String(), nil
}

// ociImage builds the single-layer image of files with the plugin's
// config. Every time in it is epoch, so the same files give the same
// digest.
func ociImage(files []entry) (v1.Image, error) {
	layer, err := gzipLayer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "kurma images/build", Comment: Name + ":" + Version},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	return mutate.ConfigFile(img, pluginConfig(cf))
}

// gzipLayer is files as one gzip-compressed OCI layer, held in memory.
func gzipLayer(files []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if err := writeTar(zw, "", nil, files); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// pluginConfig is a copy of cf set up as the plugin image: platform,
// entrypoint, root user, the PATH and CNI_PATH the plugin programs expect,
// and the labels kurma reads (name, version, protocol).
func pluginConfig(cf *v1.ConfigFile) *v1.ConfigFile {
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = OS, Arch
	cf.Created = v1.Time{Time: epoch}
	cf.Author = "kurma"
	cf.Config.Entrypoint = []string{Entrypoint}
	cf.Config.Cmd = nil
	cf.Config.User = "0:0"
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{
		"PATH=" + NetworkDir + ":" + CNIBinDir + ":/usr/sbin:/usr/bin:/sbin:/bin",
		"CNI_PATH=" + CNIBinDir,
	}
	cf.Config.Labels = map[string]string{
		labelTitle:                "cni-netplugin",
		labelVersion:              Version,
		"dev.kurma.appc-name":     Name,
		"dev.kurma.cni-plugins":   pluginsModule + "@" + PluginsVersion,
		netplugin.WrapperLabelOCI: netplugin.WrapperVersion, // see aci.go
	}
	return cf
}

// replaceLayout writes img as the layout at dir. It writes next to the
// final place, then swaps, so a failed build never leaves a half-written
// layout where the old one was.
func replaceLayout(dir string, img v1.Image) error {
	return replaceLayoutTagged(dir, img, []map[string]string{{annotationRefName: Version}})
}

// replaceLayoutTagged is replaceLayout with one index entry for img per
// element of annotations, carrying those annotations.
func replaceLayoutTagged(dir string, img v1.Image, annotations []map[string]string) error {
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	for _, a := range annotations {
		if err := p.AppendImage(img, layout.WithAnnotations(a)); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	// go-containerregistry writes some blobs 0600; an image is public data
	// that unprivileged tools (a test registry, skopeo) may need to read.
	if err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chmod(p, 0o644)
	}); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("rename: %w", err)
	}
	return nil
}
