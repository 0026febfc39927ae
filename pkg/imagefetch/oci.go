package imagefetch

import (
	"archive/tar"
	"bufio"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	ocilayout "github.com/containers/image/v5/oci/layout"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
)

// maxJSONBlob bounds manifests, indexes and configs read into memory.
const maxJSONBlob = 4 << 20

// ociLayout reads an OCI image layout directory, verifying every blob it
// uses against its digest. image names it in errors.
type ociLayout struct{ dir, image string }

func (l ociLayout) blobPath(d v1.Hash) (string, error) {
	if d.Algorithm != "sha256" || len(d.Hex) != 64 || strings.ContainsAny(d.Hex, "/.") {
		return "", fmt.Errorf("unsupported digest %q", d.String())
	}
	return filepath.Join(l.dir, "blobs", d.Algorithm, d.Hex), nil
}

// readJSONBlob reads a small blob and checks its digest and size.
func (l ociLayout) readJSONBlob(desc v1.Descriptor) ([]byte, error) {
	p, err := l.blobPath(desc.Digest)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxJSONBlob+1))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	if len(b) > maxJSONBlob {
		return nil, fmt.Errorf("blob %s: larger than %d bytes", desc.Digest, maxJSONBlob)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != desc.Digest.Hex {
		return nil, fmt.Errorf("%w: blob %s has digest sha256:%s", ErrDigestMismatch, desc.Digest, got)
	}
	if desc.Size != 0 && int64(len(b)) != desc.Size {
		return nil, fmt.Errorf("%w: blob %s is %d bytes, descriptor says %d", ErrDigestMismatch, desc.Digest, len(b), desc.Size)
	}
	return b, nil
}

// ErrDigestMismatch is wrapped when content does not match the digest or
// image ID it was named by.
var ErrDigestMismatch = errors.New("digest mismatch")

// ociImage is a resolved single-platform image in a layout.
type ociImage struct {
	manifestDesc v1.Descriptor
	manifest     *v1.Manifest
	config       *v1.ConfigFile
}

// resolve picks the image in the layout: the only one, or the one whose
// ref.name annotation equals want, descending into indexes for this host's
// platform.
func (l ociLayout) resolve(want string) (*ociImage, error) {
	desc, err := l.pick(want)
	if err != nil {
		return nil, err
	}
	for depth := 0; ; depth++ {
		if depth > 4 {
			return nil, errors.New("image indexes nested too deep")
		}
		switch desc.MediaType {
		case types.OCIImageIndex, types.DockerManifestList:
			if desc, err = l.platformManifest(desc); err != nil {
				return nil, err
			}
		case types.OCIManifestSchema1, types.DockerManifestSchema2, "":
			return l.readImage(desc)
		default:
			return nil, fmt.Errorf("unsupported media type %q", desc.MediaType)
		}
	}
}

// pick returns the descriptor in index.json that names the image: the only
// one, or the one whose ref.name annotation equals want.
func (l ociLayout) pick(want string) (v1.Descriptor, error) {
	b, err := os.ReadFile(filepath.Join(l.dir, "index.json"))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("OCI layout %s: %w", l.dir, err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		return v1.Descriptor{}, fmt.Errorf("OCI layout %s: index.json: %w", l.dir, err)
	}
	cands := idx.Manifests
	if want != "" {
		cands = nil
		for _, d := range idx.Manifests {
			if d.Annotations["org.opencontainers.image.ref.name"] == want {
				cands = append(cands, d)
			}
		}
		if len(cands) == 0 {
			return v1.Descriptor{}, fmt.Errorf("OCI layout %s: no image named %q", l.dir, want)
		}
	}
	if len(cands) == 0 {
		return v1.Descriptor{}, fmt.Errorf("OCI layout %s: index.json lists no images", l.dir)
	}
	if len(cands) > 1 {
		return v1.Descriptor{}, fmt.Errorf("OCI layout %s: %d images; name one with #<ref.name>", l.dir, len(cands))
	}
	return cands[0], nil
}

// platformManifest reads the index (or manifest list) desc names, verified
// against its digest, and returns its entry for this host's platform
// (chooseManifest).
func (l ociLayout) platformManifest(desc v1.Descriptor) (v1.Descriptor, error) {
	raw, err := l.readJSONBlob(desc)
	if err != nil {
		return v1.Descriptor{}, err
	}
	var sub v1.IndexManifest
	if err := json.Unmarshal(raw, &sub); err != nil {
		return v1.Descriptor{}, fmt.Errorf("index %s: %w", desc.Digest, err)
	}
	d, err := chooseManifest(raw, string(desc.MediaType), hostPlatform(), l.image)
	if err != nil {
		return v1.Descriptor{}, err
	}
	for _, m := range sub.Manifests {
		if m.Digest.String() == d {
			return m, nil
		}
	}
	return v1.Descriptor{}, fmt.Errorf("index %s: no entry %s", desc.Digest, d)
}

// readImage reads the manifest desc names and its config, each verified
// against its digest, and refuses an image for another platform.
func (l ociLayout) readImage(desc v1.Descriptor) (*ociImage, error) {
	raw, err := l.readJSONBlob(desc)
	if err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	if m.MediaType != "" && m.MediaType != types.OCIManifestSchema1 && m.MediaType != types.DockerManifestSchema2 {
		return nil, fmt.Errorf("manifest %s: unsupported media type %q", desc.Digest, m.MediaType)
	}
	craw, err := l.readJSONBlob(m.Config)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(craw, &cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	if err := checkConfigPlatform(&cfg, hostPlatform(), l.image); err != nil {
		return nil, err
	}
	return &ociImage{manifestDesc: desc, manifest: &m, config: &cfg}, nil
}

// unpack applies the layers in order into x's root, with whiteouts and
// opaque directories, verifying each layer's digest and diff ID. The bytes
// of a layer that fails verification are in the temp dir only, which the
// caller discards.
func (l ociLayout) unpack(img *ociImage, x *extractor) error {
	x.whiteouts = true
	if len(img.config.RootFS.DiffIDs) != 0 && len(img.config.RootFS.DiffIDs) != len(img.manifest.Layers) {
		return fmt.Errorf("config lists %d diff IDs for %d layers", len(img.config.RootFS.DiffIDs), len(img.manifest.Layers))
	}
	for i, desc := range img.manifest.Layers {
		var diffID *v1.Hash
		if len(img.config.RootFS.DiffIDs) > 0 {
			diffID = &img.config.RootFS.DiffIDs[i]
		}
		if err := l.applyLayer(desc, diffID, x); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, desc.Digest, err)
		}
	}
	return x.finish()
}

// maxZstdWindow bounds the window a zstd layer may ask the decoder to hold
// (the library's default is 512 MiB): 128 MiB, the limit the reference
// zstd decoder applies unless told --long or --memory, which every level
// up to --ultra -22 stays within.
const maxZstdWindow = 1 << 27

// zstdWindowCap reports a frame over maxZstdWindow as hostile: the
// decoder says ErrWindowSizeExceeded for a window descriptor over it, and
// ErrDecoderSizeExceeded for a single-segment frame (no descriptor: its
// window is its content size) over it.
type zstdWindowCap struct{ r io.Reader }

func (z zstdWindowCap) Read(p []byte) (int, error) {
	n, err := z.r.Read(p)
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		err = fmt.Errorf("%w: zstd: a frame asks for a window over the %d MiB limit: %w", ErrHostile, maxZstdWindow>>20, err)
	}
	return n, err
}

// layerStream returns the uncompressed stream of a layer blob read from r,
// by its media type, and a func that releases the decompressor.
func layerStream(mediaType types.MediaType, r io.Reader) (*decompressed, func(), error) {
	br := bufio.NewReader(r)
	d := &decompressed{Reader: br, Kind: "none", src: br}
	switch mediaType {
	case types.OCILayer, types.DockerLayer, types.OCIRestrictedLayer, types.DockerForeignLayer:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		zr.Multistream(false)
		d.Reader, d.Kind = zr, "gzip"
	case types.OCILayerZStd:
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, nil, err
		}
		d.Reader, d.Kind = zstdWindowCap{zr}, "zstd"
		return d, zr.Close, nil
	case types.OCIUncompressedLayer, types.DockerUncompressedLayer, types.OCIUncompressedRestrictedLayer:
	default:
		return nil, nil, fmt.Errorf("unsupported layer media type %q", mediaType)
	}
	return d, func() {}, nil
}

// applyLayer extracts one layer blob. Its uncompressed stream counts
// against x's budget; after the tar's end only zero padding may follow,
// and nothing after the compressed stream. The blob digest, size and
// diff ID are checked over exactly what was read.
func (l ociLayout) applyLayer(desc v1.Descriptor, diffID *v1.Hash, x *extractor) error {
	p, err := l.blobPath(desc.Digest)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	ch := sha256.New()
	cr := &countingHash{r: f, h: ch}
	d, release, err := layerStream(desc.MediaType, cr)
	if err != nil {
		return err
	}
	defer release()
	uh := sha256.New()
	sr := x.stream(d)
	defer sr.finish()
	ur := io.TeeReader(sr, uh)
	tr := tar.NewReader(ur)
	x.startLayer()
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading tar: %w", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		var link string
		if hdr.Typeflag == tar.TypeLink {
			link = hdr.Linkname
		}
		if err := x.add(hdr.Name, hdr, hdr.Name, link, tr); err != nil {
			return err
		}
	}
	if err := checkTarTail(ur); err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	if n, err := io.Copy(io.Discard, cr); err != nil || n != 0 {
		return fmt.Errorf("%w: %d bytes after the end of the %s stream (%v)", ErrHostile, n, d.Kind, err)
	}
	if got := hex.EncodeToString(ch.Sum(nil)); got != desc.Digest.Hex {
		return fmt.Errorf("%w: blob has digest sha256:%s, manifest says %s", ErrDigestMismatch, got, desc.Digest)
	}
	if desc.Size != 0 && cr.n != desc.Size {
		return fmt.Errorf("%w: blob is %d bytes, manifest says %d", ErrDigestMismatch, cr.n, desc.Size)
	}
	if diffID != nil {
		if got := hex.EncodeToString(uh.Sum(nil)); diffID.Algorithm != "sha256" || got != diffID.Hex {
			return fmt.Errorf("%w: uncompressed layer has diff ID sha256:%s, config says %s", ErrDigestMismatch, got, diffID)
		}
	}
	return nil
}

type countingHash struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (c *countingHash) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// imageFromOCI fills the metadata kurma needs from an OCI config.
func imageFromOCI(img *ociImage, name, version string) *Image {
	cfg := img.config.Config
	exec := append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...)
	user, group := cfg.User, ""
	if i := strings.IndexByte(user, ':'); i >= 0 {
		user, group = user[:i], user[i+1:]
	}
	if user == "" {
		user = "0"
	}
	if group == "" {
		group = "0"
	}
	// The platform the image was built for (readImage refused another);
	// one that names none runs as this host's.
	host := hostPlatform()
	labels := map[string]string{"os": cmp.Or(img.config.OS, host.OS), "arch": cmp.Or(img.config.Architecture, host.Architecture)}
	var annotations map[string]string
	for k, v := range cfg.Labels {
		labels[k] = v
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[k] = v
	}
	var size int64
	for _, l := range img.manifest.Layers {
		size += l.Size
	}
	return &Image{
		ID:          "sha256-" + img.manifestDesc.Digest.Hex,
		Name:        name,
		Version:     version,
		Labels:      labels,
		Annotations: annotations,
		Format:      "oci",
		App: App{
			Exec:       exec,
			Env:        append([]string(nil), cfg.Env...),
			User:       user,
			Group:      group,
			WorkingDir: cfg.WorkingDir,
		},
		Size: size,
	}
}

// unpackOCILayout resolves and unpacks the image in layoutDir (kurma's
// private copy, whose one image containers/image tagged "image") into a
// new store temp dir and commits it.
func (f *Fetcher) unpackOCILayout(ctx context.Context, layoutDir, name, version, source string, v *Verification) (*Image, error) {
	l := ociLayout{dir: layoutDir, image: cmp.Or(source, name)}
	oimg, err := l.resolve("image")
	if err != nil {
		return nil, err
	}
	meta := imageFromOCI(oimg, name, version)
	meta.Source = source
	meta.Verified = v
	img, err := f.build("oci", meta, func(rootfs string) error {
		x, err := newExtractor(ctx, rootfs, f.opts.MaxSize)
		if err != nil {
			return err
		}
		return l.unpack(oimg, x)
	})
	if err != nil {
		return nil, err
	}
	// An OCI rootfs is determined by its ID (the manifest's digest), so a
	// stored one takes this fetch's verification when it is stronger.
	return f.recordVerification(img, v)
}

// importOCILayout imports the one image of a local OCI layout directory.
func (f *Fetcher) importOCILayout(ctx context.Context, dir, uri string, r request) (*Image, error) {
	return f.importOCILayoutAs(ctx, dir, "", ociName(dir), layoutVersion(dir), uri, r)
}

// importOCILayoutAs imports the image of the OCI layout in dir whose ref
// name is image (the only one when image is ""), through containers/image
// so that the signature policy judges it (as transport "oci", scope: the
// layout's path), as name and version.
func (f *Fetcher) importOCILayoutAs(ctx context.Context, dir, image, name, version, uri string, r request) (*Image, error) {
	src, err := ocilayout.NewReference(dir, image)
	if err != nil {
		return nil, err
	}
	sys, err := f.systemContext("")
	if err != nil {
		return nil, err
	}
	return f.importImage(ctx, src, sys, r, name, version, uri)
}

// layoutVersion is the ref.name annotation of a layout's only image when
// it looks like a tag (no "/"): the version kurma shows. It is display
// metadata; an unreadable index gives "".
func layoutVersion(dir string) string {
	if n := layoutRefName(dir); !strings.Contains(n, "/") {
		return n
	}
	return ""
}

// layoutRefName is the ref.name annotation of a layout's only image, ""
// when it has none, or several images, or an unreadable index.
func layoutRefName(dir string) string {
	b, err := readFileCapped(filepath.Join(dir, "index.json"), maxJSONBlob)
	if err != nil {
		return ""
	}
	var idx v1.IndexManifest
	if json.Unmarshal(b, &idx) != nil || len(idx.Manifests) != 1 {
		return ""
	}
	return idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
}

func readFileCapped(p string, max int64) ([]byte, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s: larger than %d bytes", p, max)
	}
	return b, err
}

// isOCIArchive reports whether the file at p is a plain tar holding an OCI
// layout (an oci-layout entry among the first entries).
func isOCIArchive(p string) bool {
	fh, err := os.Open(p)
	if err != nil {
		return false
	}
	defer fh.Close()
	tr := tar.NewReader(fh)
	for i := 0; i < 64; i++ {
		hdr, err := tr.Next()
		if err != nil {
			return false
		}
		n := strings.TrimPrefix(hdr.Name, "./")
		if n == "oci-layout" {
			return true
		}
		if n == "manifest" || strings.HasPrefix(n, "rootfs") {
			return false
		}
	}
	return false
}

// unpackOCIArchive extracts an OCI archive tar into dst with the same
// safety rules as image content.
func unpackOCIArchive(ctx context.Context, p, dst string, maxBytes int64) error {
	fh, err := os.Open(p)
	if err != nil {
		return err
	}
	defer fh.Close()
	x, err := newExtractor(ctx, dst, maxBytes)
	if err != nil {
		return err
	}
	x.chown = false
	sr := x.stream(fh)
	defer sr.finish()
	tr := tar.NewReader(sr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return checkTarTail(sr)
		}
		if err != nil {
			return fmt.Errorf("reading OCI archive: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir {
			return hostile(hdr.Name, "OCI archives hold only files and directories")
		}
		if err := x.add(hdr.Name, hdr, hdr.Name, "", tr); err != nil {
			return err
		}
	}
}
