package imagefetch

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// fetchFile imports a local ACI, OCI layout directory or OCI archive. A
// stored URI whose file has the same size and mtime is returned without
// reading the file.
func (f *Fetcher) fetchFile(ctx context.Context, uri, p string) (*Image, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("file URI path %q is not absolute", p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	statPath := p
	if fi.IsDir() {
		statPath = filepath.Join(p, "index.json")
		if fi, err = os.Stat(statPath); err != nil {
			return nil, fmt.Errorf("%s is a directory but not an OCI layout: %w", p, err)
		}
	}
	if r, ok := f.store.lookup(uri); ok && r.Size == fi.Size() && r.MtimeNs == fi.ModTime().UnixNano() {
		if img, err := f.store.get(r.ID); err == nil {
			f.log.WithFields(map[string]any{"image": img.Name, "id": img.ID, "source": uri}).Debug("store hit: file unchanged")
			return img, nil
		}
	}
	var img *Image
	switch {
	case statPath != p:
		img, err = f.unpackOCILayout(ctx, p, "", ociName(p), uri)
	case isOCIArchive(p):
		img, err = f.importOCIArchive(ctx, p, uri)
	default:
		img, err = f.importACI(ctx, aciSource{
			uri:  uri,
			open: func() (io.ReadCloser, error) { return os.Open(p) },
			asc: func(context.Context) ([]byte, error) {
				return os.ReadFile(p + ".asc")
			},
		})
	}
	if err != nil {
		return nil, err
	}
	if err := f.store.setRef(uri, ref{ID: img.ID, Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()}); err != nil {
		return nil, err
	}
	return img, nil
}

func (f *Fetcher) importOCIArchive(ctx context.Context, p, uri string) (*Image, error) {
	tmp, err := f.store.tempDir("ociarchive")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := unpackOCIArchive(ctx, p, tmp, f.opts.MaxSize); err != nil {
		return nil, err
	}
	return f.unpackOCILayout(ctx, tmp, "", ociName(p), uri)
}

// ociName names a local OCI image after its file or directory.
func ociName(p string) string {
	b := filepath.Base(p)
	return strings.TrimSuffix(strings.TrimSuffix(b, ".tar"), ".oci")
}
