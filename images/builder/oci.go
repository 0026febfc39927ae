package builder

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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

// writeOCI writes the OCI image layout of the plugin image id for arch at
// dir (replacing any previous one) and returns the manifest digest.
func (id identity) writeOCI(dir string, files []entry, arch string) (string, error) {
	img, err := id.ociImage(files, arch)
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	if err := replaceLayoutTagged(dir, img, []map[string]string{{annotationRefName: id.version}}); err != nil {
		return "", err
	}
	return digest.String(), nil
}

// ociImage builds the single-layer image of files for arch with the
// plugin's config.
func (id identity) ociImage(files []entry, arch string) (v1.Image, error) {
	return oneLayerImage(files, arch, "kurma images/build", id.name+":"+id.version, id.pluginConfig)
}

// oneLayerImage builds the OCI image of files as one gzip layer whose
// history says createdBy and comment, with the config that setConfig fills
// in over kurma's common one (linux/arch, author, root user, /). Every
// time in it is epoch, so the same files give the same digest.
func oneLayerImage(files []entry, arch, createdBy, comment string, setConfig func(*v1.ConfigFile)) (v1.Image, error) {
	layer, err := gzipLayer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy, Comment: comment},
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
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = OS, arch
	if arch == "arm64" {
		cf.Variant = "v8" // what an arm64 host asks for first (imagefetch)
	}
	cf.Created = v1.Time{Time: epoch}
	cf.Author = "kurma"
	cf.Config.User = "0:0"
	cf.Config.WorkingDir = "/"
	setConfig(cf)
	return mutate.ConfigFile(img, cf)
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

// pluginConfig sets cf up as the plugin image id: entrypoint, the
// environment its programs expect, and the labels kurma reads (name,
// version, protocol).
func (id identity) pluginConfig(cf *v1.ConfigFile) {
	cf.Config.Entrypoint = id.mainExec()
	cf.Config.Cmd = nil
	cf.Config.Env = id.environment()
	cf.Config.Labels = map[string]string{
		labelTitle:            id.title,
		labelVersion:          id.version,
		"dev.kurma.appc-name": id.name,
	}
	if !id.notWrapper {
		cf.Config.Labels["dev.kurma.cni-plugins"] = pluginsModule + "@" + PluginsVersion
		cf.Config.Labels[netplugin.WrapperLabelOCI] = netplugin.WrapperVersion // see aci.go
	}
	for k, v := range id.annotations {
		cf.Config.Labels[ociLabel(k)] = v
	}
}

// ociLabel is the OCI label of an ACI annotation of kurma's:
// kurma.dev/flannel → dev.kurma.flannel.
func ociLabel(annotation string) string {
	return "dev.kurma." + strings.TrimPrefix(annotation, "kurma.dev/")
}

// replaceLayoutTagged writes img as the layout at dir, one index entry per
// element of annotations, carrying those annotations. It writes next to
// the final place, then swaps, so a failed build never leaves a
// half-written layout where the old one was.
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
