package imagefetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// fetchFile imports a local ACI, OCI layout directory or OCI archive. A
// stored URI whose file has the same size and mtime, and whose image meets
// r, is returned without reading the file.
func (f *Fetcher) fetchFile(ctx context.Context, uri, p string, r request) (*Image, error) {
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
	if img, ok := f.storedFile(uri, fi, r); ok {
		return img, nil
	}
	local := statPath != p || isOCIArchive(p)
	if local && r.imageName != "" {
		return nil, fmt.Errorf("%w: a local OCI layout carries no image name to check against %q", ErrImageName, r.imageName)
	}
	var img *Image
	switch {
	case statPath != p:
		img, err = f.importOCILayout(ctx, p, uri, r)
	case local:
		img, err = f.importOCIArchive(ctx, p, uri, r)
	default:
		img, fi, err = f.importACIFile(ctx, uri, p, r)
	}
	if err != nil {
		return nil, err
	}
	return img, f.rememberFile(uri, img, fi)
}

// storedFile returns the image stored for the local file uri names when
// the file (fi) has the size and mtime it had then and the image meets r.
func (f *Fetcher) storedFile(uri string, fi os.FileInfo, r request) (*Image, bool) {
	img, prev, ok := f.stored(uri, r)
	if !ok || prev.Size != fi.Size() || prev.MtimeNs != fi.ModTime().UnixNano() {
		return nil, false
	}
	f.log.WithFields(map[string]any{"image": img.Name, "id": img.ID, "source": uri}).Debug("store hit: file unchanged")
	return img, true
}

// rememberFile records that the local file uri names (fi) gave img.
func (f *Fetcher) rememberFile(uri string, img *Image, fi os.FileInfo) error {
	return f.store.setRef(uri, ref{ID: img.ID, Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()})
}

// importACIFile reads the ACI at p once into a store temp dir and imports
// that copy; its signature, when r's mode looks at one, is <p>.asc. It
// returns the FileInfo of the file as it was read.
func (f *Fetcher) importACIFile(ctx context.Context, uri, p string, r request) (*Image, os.FileInfo, error) {
	tmp, err := f.store.tempDir("file")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "image.aci")
	fi, err := copyFileCapped(ctx, p, file, f.opts.MaxSize)
	if err != nil {
		return nil, nil, err
	}
	img, err := f.importACI(ctx, aciSource{
		uri:  uri,
		file: file,
		signature: func(context.Context) ([]byte, error) {
			fh, err := os.Open(p + ".asc")
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%s.asc: %w", p, errNoSignature)
			}
			if err != nil {
				return nil, err
			}
			defer fh.Close()
			return readSignature(fh, p+".asc")
		},
	}, r)
	return img, fi, err
}

// copyFileCapped copies src to the new file dst, refusing more than max
// bytes, and returns src's FileInfo as of the open.
func copyFileCapped(ctx context.Context, src, dst string, max int64) (os.FileInfo, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the %d-byte limit", ErrHostile, src, fi.Size(), max)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(out, &capReader{r: in, max: max, ctx: ctx})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", src, err)
	}
	return fi, nil
}

// importOCIArchive unpacks an OCI archive into a store temp dir and
// imports the layout in it.
func (f *Fetcher) importOCIArchive(ctx context.Context, p, uri string, r request) (*Image, error) {
	tmp, err := f.unpackedArchive(ctx, p)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	return f.importOCILayoutAs(ctx, tmp, "", ociName(p), layoutVersion(tmp), uri, r)
}

// unpackedArchive is the OCI archive at p unpacked, by the secure
// extractor, into a store temp dir the caller removes.
func (f *Fetcher) unpackedArchive(ctx context.Context, p string) (string, error) {
	tmp, err := f.store.tempDir("ociarchive")
	if err != nil {
		return "", err
	}
	if err := unpackOCIArchive(ctx, p, tmp, f.opts.MaxSize); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}

// ociName names a local OCI image after its file or directory.
func ociName(p string) string {
	b := filepath.Base(p)
	return strings.TrimSuffix(strings.TrimSuffix(b, ".tar"), ".oci")
}
