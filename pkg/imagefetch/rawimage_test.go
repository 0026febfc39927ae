package imagefetch

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// rawLayer is a layer given byte for byte, so tests can make the blobs a
// real writer never would.
type rawLayer struct {
	blob      []byte
	mediaType types.MediaType
	// uncompressed is what the config's diff ID is the digest of; nil
	// means the blob itself (an uncompressed layer).
	uncompressed []byte
	// size is what the manifest declares; 0 means len(blob).
	size int64
}

// rawImage is an OCI image whose manifest and config are written by hand
// around rawLayers (same app as testManifest).
type rawImage struct {
	config, manifest []byte
	layers           map[v1.Hash]rawLayer
}

var _ partial.CompressedImageCore = (*rawImage)(nil)

func newRawImage(t testing.TB, layers ...rawLayer) v1.Image {
	t.Helper()
	r := &rawImage{layers: map[v1.Hash]rawLayer{}}
	cfg := v1.ConfigFile{OS: "linux", Architecture: hostPlatform().Architecture, RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Entrypoint: []string{"/bin/plugin"}, Cmd: []string{"--serve"}, Env: []string{"PATH=/bin"}}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for _, l := range layers {
		d := sha256Hash(l.blob)
		u := l.uncompressed
		if u == nil {
			u = l.blob
		}
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, sha256Hash(u))
		size := l.size
		if size == 0 {
			size = int64(len(l.blob))
		}
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: l.mediaType, Digest: d, Size: size})
		r.layers[d] = l
	}
	var err error
	if r.config, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: sha256Hash(r.config), Size: int64(len(r.config))}
	if r.manifest, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	img, err := partial.CompressedToImage(r)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func (r *rawImage) RawConfigFile() ([]byte, error)      { return r.config, nil }
func (r *rawImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (r *rawImage) RawManifest() ([]byte, error)        { return r.manifest, nil }

func (r *rawImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	l, ok := r.layers[h]
	if !ok {
		return nil, fmt.Errorf("no layer %s", h)
	}
	return rawCompressed{l: l, d: h}, nil
}

type rawCompressed struct {
	l rawLayer
	d v1.Hash
}

func (c rawCompressed) Digest() (v1.Hash, error)            { return c.d, nil }
func (c rawCompressed) Size() (int64, error)                { return int64(len(c.l.blob)), nil }
func (c rawCompressed) MediaType() (types.MediaType, error) { return c.l.mediaType, nil }
func (c rawCompressed) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(c.l.blob)), nil
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum)}
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zstdFrame writes one zstd frame by hand: raw as raw blocks, then zeros
// zero bytes as RLE blocks of 4 bytes per 128 KiB, so a frame that
// decompresses to gigabytes is a few hundred kilobytes.
func zstdFrame(raw []byte, zeros int64) []byte {
	const maxBlock = 128 << 10
	var b bytes.Buffer
	b.Write([]byte{0x28, 0xb5, 0x2f, 0xfd}) // magic
	b.WriteByte(0x00)                       // no content size, no checksum, no dictionary
	b.WriteByte(7 << 3)                     // window 128 KiB
	type block struct {
		typ  int
		size int
		data []byte
	}
	var blocks []block
	for len(raw) > 0 {
		n := min(len(raw), maxBlock)
		blocks = append(blocks, block{0, n, raw[:n]})
		raw = raw[n:]
	}
	for zeros > 0 {
		n := int(min(zeros, maxBlock))
		blocks = append(blocks, block{1, n, []byte{0}})
		zeros -= int64(n)
	}
	for i, bl := range blocks {
		h := bl.size<<3 | bl.typ<<1
		if i == len(blocks)-1 {
			h |= 1
		}
		b.Write([]byte{byte(h), byte(h >> 8), byte(h >> 16)})
		b.Write(bl.data)
	}
	return b.Bytes()
}

// noTemp fails when the store dir holds a fetch's temp dir.
func noTemp(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Fatalf("temp dir left in the store: %s", e.Name())
		}
	}
}
