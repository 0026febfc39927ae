package imagefetch

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/ulikunitz/xz"
)

// bombDeadline is how long a refusal may take: the bombs below decompress
// to gigabytes, which a capped reader stops after a megabyte or so.
const bombDeadline = 20 * time.Second

// fetchBomb fetches uri into a fresh store and wants it refused as hostile,
// quickly, with nothing stored and nothing left in the store's temp space.
func fetchBomb(t *testing.T, uri string, opts Options, wantMsg string) {
	t.Helper()
	opts.Dir = filepath.Join(t.TempDir(), "store")
	f := newTestFetcher(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*bombDeadline)
	defer cancel()
	start := time.Now()
	_, err := f.Fetch(ctx, uri)
	took := time.Since(start)
	if !errors.Is(err, ErrHostile) {
		t.Fatalf("%v (after %s), want ErrHostile", err, took)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("%v, want it to say %q", err, wantMsg)
	}
	if took > bombDeadline {
		t.Fatalf("refused after %s, more than %s", took, bombDeadline)
	}
	if imgs, _ := f.List(); len(imgs) != 0 {
		t.Fatalf("hostile image stored: %+v", imgs)
	}
	noTemp(t, opts.Dir)
}

const (
	afterTar  = "data after the tar's end-of-archive marker"
	afterGzip = "data after the end of the gzip stream"
	overPad   = "bytes of padding after the tar's end-of-archive marker"
)

// TestACITrailingDataRefused: an ACI is one tar in one compressed stream;
// bytes after either are refused, although the image ID would cover them.
func TestACITrailingDataRefused(t *testing.T) {
	raw := tarBytes(t, aciEntries(testManifest, testRootfs))
	cases := []struct {
		name, msg string
		body      []byte
	}{
		{"plain tar then garbage", afterTar, append(append([]byte{}, raw...), "#!/bin/sh evil"...)},
		{"gzip then a second member", afterGzip, append(gzipBytes(t, raw), gzipBytes(t, []byte("evil"))...)},
		{"gzip then a second member of zeros", afterGzip, append(gzipBytes(t, raw), gzipBytes(t, make([]byte, 4<<20))...)},
		{"gzip then garbage", afterGzip, append(gzipBytes(t, raw), "garbage"...)},
		{"gzip of tar then garbage", afterTar, gzipBytes(t, append(append([]byte{}, raw...), "evil"...))},
		{"gzip of tar then too much padding", overPad, gzipBytes(t, append(append([]byte{}, raw...), make([]byte, 2<<20)...))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "bomb.aci", c.body)
			fetchBomb(t, "file://"+p, Options{}, c.msg)
		})
	}
}

// TestTarPaddingAccepted: GNU tar pads to 10 KiB records; that is not
// trailing data.
func TestTarPaddingAccepted(t *testing.T) {
	raw := tarBytes(t, aciEntries(testManifest, testRootfs))
	padded := append(append([]byte{}, raw...), make([]byte, 10240-len(raw)%10240)...)
	p := writeFile(t, t.TempDir(), "padded.aci", gzipBytes(t, padded))
	img, err := newTestFetcher(t, Options{}).Fetch(context.Background(), "file://"+p)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, img.Rootfs, testTree...)

	layer := append(append([]byte{}, tarBytes(t, testRootfs)...), make([]byte, 9*512)...)
	dir := writeLayout(t, t.TempDir(), newRawImage(t, rawLayer{blob: gzipBytes(t, layer), mediaType: types.OCILayer, uncompressed: layer}))
	img, err = newTestFetcher(t, Options{}).Fetch(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, img.Rootfs, testTree...)
}

// TestOCILayerBombsRefused: a layer's decompressed stream is capped and
// must end with its tar; the diff IDs here cover the extra bytes, so only
// those rules can refuse them.
func TestOCILayerBombsRefused(t *testing.T) {
	layer := tarBytes(t, testRootfs)
	plus := func(b []byte, more string) []byte { return append(append([]byte{}, b...), more...) }
	const huge = 8 << 30 // zeros an RLE block stream expands to
	cases := []struct {
		name, msg string
		l         rawLayer
	}{
		{"uncompressed then garbage", afterTar,
			rawLayer{blob: plus(layer, "evil"), mediaType: types.OCIUncompressedLayer}},
		{"gzip then a second member", afterGzip,
			rawLayer{blob: append(gzipBytes(t, layer), gzipBytes(t, []byte("evil"))...), mediaType: types.OCILayer, uncompressed: plus(layer, "evil")}},
		{"gzip of tar then garbage", afterTar,
			rawLayer{blob: gzipBytes(t, plus(layer, "evil")), mediaType: types.OCILayer, uncompressed: plus(layer, "evil")}},
		{"zstd then a frame of garbage", afterTar,
			rawLayer{blob: append(zstdFrame(layer, 0), zstdFrame([]byte("evil"), 0)...), mediaType: types.OCILayerZStd, uncompressed: plus(layer, "evil")}},
		{"zstd RLE gigabytes after the tar, same frame", overPad,
			rawLayer{blob: zstdFrame(layer, huge), mediaType: types.OCILayerZStd, uncompressed: layer}},
		{"zstd RLE gigabytes in a second frame", overPad,
			rawLayer{blob: append(zstdFrame(layer, 0), zstdFrame(nil, huge)...), mediaType: types.OCILayerZStd, uncompressed: layer}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeLayout(t, t.TempDir(), newRawImage(t, c.l))
			fetchBomb(t, "file://"+dir, Options{}, c.msg)
		})
	}
}

// bigFileLayer is a zstd layer holding one file of size zero bytes,
// written as RLE blocks.
func bigFileLayer(t *testing.T, size int64) rawLayer {
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	pad := (512 - size%512) % 512
	return rawLayer{blob: zstdFrame(hdr.Bytes(), size+pad+1024), mediaType: types.OCILayerZStd, uncompressed: hdr.Bytes()}
}

// TestUncompressedCapRefused: the uncompressed cap holds inside a layer.
func TestUncompressedCapRefused(t *testing.T) {
	dir := writeLayout(t, t.TempDir(), newRawImage(t, bigFileLayer(t, 8<<20)))
	fetchBomb(t, "file://"+dir, Options{MaxSize: 4 << 20}, "larger than the 4194304-byte limit")
}

// TestZeroOptionsAreTheDefaults: kurmad passes max_image_size and
// fetch_timeout as 0 when the config leaves them out; the fetcher then
// enforces its own defaults, never "no cap".
func TestZeroOptionsAreTheDefaults(t *testing.T) {
	f := newTestFetcher(t, Options{})
	if f.opts.MaxSize != DefaultMaxSize || f.opts.FetchTimeout != DefaultFetchTimeout {
		t.Errorf("cap %d, timeout %s; want %d, %s", f.opts.MaxSize, f.opts.FetchTimeout, DefaultMaxSize, DefaultFetchTimeout)
	}
}

// TestFetchDeadlineInsideLayer: one layer holding a 1.9 GiB file takes
// longer than a 200 ms fetch deadline to unpack; the fetch stops inside the
// layer, at the deadline, and leaves nothing.
func TestFetchDeadlineInsideLayer(t *testing.T) {
	dir := writeLayout(t, t.TempDir(), newRawImage(t, bigFileLayer(t, 1900<<20)))
	store := filepath.Join(t.TempDir(), "store")
	f := newTestFetcher(t, Options{Dir: store, FetchTimeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := f.Fetch(context.Background(), "file://"+dir)
	took := time.Since(start)
	if !errors.Is(err, ErrFetchTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v (after %s), want ErrFetchTimeout", err, took)
	}
	if !strings.Contains(err.Error(), "fetch timed out after 200ms") {
		t.Fatalf("%v: want the deadline in the message", err)
	}
	if took > bombDeadline {
		t.Fatalf("stopped after %s", took)
	}
	if imgs, _ := f.List(); len(imgs) != 0 {
		t.Fatalf("image stored: %+v", imgs)
	}
	noTemp(t, store)
}

// TestHugeOpaqueDir: a directory with thousands of lower entries, and a
// layer that writes thousands more into it and then marks it opaque a
// hundred thousand times. Each marker used to re-read the directory and
// compare every entry with every path the layer wrote (minutes of work
// here); now the directory is emptied of lower entries once, in one pass.
func TestHugeOpaqueDir(t *testing.T) {
	const n, markers = 4000, 100000
	lower := []entry{{Name: "d", Type: tar.TypeDir}}
	var upper []entry
	want := []string{"d d"}
	for i := range n {
		lower = append(lower, entry{Name: fmt.Sprintf("d/lower%05d", i), Body: "l"})
		upper = append(upper, entry{Name: fmt.Sprintf("d/upper%05d", i), Body: "u"})
		want = append(want, fmt.Sprintf("d/upper%05d f", i))
	}
	for range markers {
		upper = append(upper, entry{Name: "d/.wh..wh..opq"})
	}
	dir := writeLayout(t, t.TempDir(), ociImageFromLayers(t, tarBytes(t, lower), tarBytes(t, upper)))
	store := filepath.Join(memDir(t), "store")
	f := newTestFetcher(t, Options{Dir: store, FetchTimeout: 3 * bombDeadline})
	start := time.Now()
	img, err := f.Fetch(context.Background(), "file://"+dir)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%v (after %s)", err, took)
	}
	t.Logf("%d lower and %d upper entries, %d opaque markers: %s", n, n, markers, took)
	if took > bombDeadline {
		t.Fatalf("took %s, more than %s", took, bombDeadline)
	}
	wantTree(t, img.Rootfs, want...)
	noTemp(t, store)
}

// TestOpaqueAfterChildrenPrunesLowerGrandchildren: a marker that follows
// the layer's own entries in the directory hides every lower entry below
// it, also inside subdirectories the layer wrote into.
func TestOpaqueAfterChildrenPrunesLowerGrandchildren(t *testing.T) {
	lower := tarBytes(t, []entry{{Name: "d", Type: tar.TypeDir}, {Name: "d/sub", Type: tar.TypeDir},
		{Name: "d/sub/old", Body: "o"}, {Name: "d/gone", Body: "g"}})
	upper := tarBytes(t, []entry{{Name: "d/sub/new", Body: "n"}, {Name: "d/.wh..wh..opq"}})
	dir := writeLayout(t, t.TempDir(), ociImageFromLayers(t, lower, upper))
	img, err := newTestFetcher(t, Options{}).Fetch(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, img.Rootfs, "d d", "d/sub d", "d/sub/new f")
}

// TestDockerBlobOverDeclaredSize: a registry serving a blob larger than
// the manifest says is cut off at the declared size, and one declaring
// more than the image size limit is refused before it is read.
func TestDockerBlobOverDeclaredSize(t *testing.T) {
	reg := newTestRegistry(t)
	layer := tarBytes(t, append(testRootfs[:len(testRootfs):len(testRootfs)], entry{Name: "pad", Body: string(randomBytes(t, 4<<20))}))
	blob := gzipBytes(t, layer)
	reg.push(t, "kurma/liar:v1", newRawImage(t, rawLayer{blob: blob, mediaType: types.OCILayer, uncompressed: layer, size: 1000}))
	reg.push(t, "kurma/huge:v1", newRawImage(t, rawLayer{blob: blob, mediaType: types.OCILayer, uncompressed: layer, size: 64 << 30}))
	opts := Options{InsecureRegistries: []string{reg.host}}
	fetchBomb(t, "docker://"+reg.host+"/kurma/liar:v1", opts, "is larger than 1000 bytes")
	fetchBomb(t, "docker://"+reg.host+"/kurma/huge:v1", opts, "declares 68719476736 bytes")
}

// memDir returns a temp dir on tmpfs (/dev/shm) when there is one, so a
// test that times the extractor's own work is not timing a busy disk.
func memDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "kurma-imagefetch-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecompressorMemoryCapped: a zstd layer whose frame asks for a 1 GiB
// window and an xz ACI whose block asks for a 1 GiB dictionary are
// refused before the decoder allocates them; xz -9's 64 MiB is accepted.
func TestDecompressorMemoryCapped(t *testing.T) {
	layer := tarBytes(t, testRootfs)
	wide := zstdFrame(layer, 0)
	wide[5] = 20 << 3 // window descriptor: 2^(10+20) bytes
	dir := writeLayout(t, t.TempDir(), newRawImage(t, rawLayer{blob: wide, mediaType: types.OCILayerZStd, uncompressed: layer}))
	fetchBomb(t, "file://"+dir, Options{}, "a frame asks for a window over the 128 MiB limit")
	// A single-segment frame has no window descriptor: its window is its
	// content size, here 1 GiB.
	single := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 2<<6 | 1<<5}, binary.LittleEndian.AppendUint32(nil, 1<<30)...)
	single = append(single, zstdFrame(layer, 0)[6:]...)
	dir = writeLayout(t, t.TempDir(), newRawImage(t, rawLayer{blob: single, mediaType: types.OCILayerZStd, uncompressed: layer}))
	fetchBomb(t, "file://"+dir, Options{}, "a frame asks for a window over the 128 MiB limit")

	xzACI := compress(t, tarBytes(t, aciEntries(testManifest, testRootfs)), "xz")
	for _, tt := range []struct {
		dict byte // LZMA2 dictionary size byte
		ok   bool
	}{{28, true}, {29, false}, {36, false}, {40, false}} {
		body := withXZDict(t, xzACI, tt.dict)
		p := writeFile(t, t.TempDir(), "image.aci", body)
		if !tt.ok {
			fetchBomb(t, "file://"+p, Options{}, fmt.Sprintf("asks for a %d MiB dictionary, over the 64 MiB limit", xzDictSize(tt.dict)>>20))
			continue
		}
		f := newTestFetcher(t, Options{})
		if _, err := f.Fetch(context.Background(), "file://"+p); err != nil {
			t.Errorf("xz with a %d MiB dictionary: %v", xzDictSize(tt.dict)>>20, err)
		}
	}
}

// TestXZDictCapNotSidestepped: the dictionary check follows the stream the
// decoder reads, from its start: an empty index and footer appended after
// an xz stream whose block asks for a 1 GiB dictionary (data the decoder
// reads only after the block) do not stand in for the stream's own.
func TestXZDictCapNotSidestepped(t *testing.T) {
	xzACI := withXZDict(t, compress(t, tarBytes(t, aciEntries(testManifest, testRootfs)), "xz"), 36)
	index := []byte{0x00, 0x00, 0x00, 0x00} // indicator, no records, padding
	index = binary.LittleEndian.AppendUint32(index, crc32.ChecksumIEEE(index))
	footer := binary.LittleEndian.AppendUint32(nil, uint32(len(index)/4-1))
	footer = append(footer, xzACI[6:8]...) // the stream flags
	footer = append(binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(footer)), footer...)
	footer = append(footer, 'Y', 'Z')
	body := append(append(bytes.Clone(xzACI), index...), footer...)
	p := writeFile(t, t.TempDir(), "image.aci", body)
	fetchBomb(t, "file://"+p, Options{}, "asks for a 1024 MiB dictionary, over the 64 MiB limit")
}

// TestXZManyBlocksAccepted: the dictionary check follows a stream of many
// blocks, each of LZMA chunks (compressible data) and uncompressed chunks
// (random data), to its index, and the image is unpacked whole.
func TestXZManyBlocksAccepted(t *testing.T) {
	random := string(randomBytes(t, 1<<20))
	zeros := string(make([]byte, 1<<20))
	rootfs := append(slices.Clone(testRootfs), entry{Name: "random", Body: random}, entry{Name: "zeros", Body: zeros})
	var buf bytes.Buffer
	w, err := xz.WriterConfig{BlockSize: 128 << 10, CheckSum: xz.SHA256}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(tarBytes(t, aciEntries(testManifest, rootfs))); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, t.TempDir(), "image.aci", buf.Bytes())
	img, err := newTestFetcher(t, Options{}).Fetch(context.Background(), "file://"+p)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"random": random, "zeros": zeros} {
		if got, err := os.ReadFile(filepath.Join(img.Rootfs, name)); err != nil || string(got) != want {
			t.Errorf("%s: %d bytes, %v; want %d bytes as written", name, len(got), err, len(want))
		}
	}
}

// withXZDict rewrites the LZMA2 dictionary size of the first (only) block
// of an xz stream, fixing the block header's CRC32.
func withXZDict(t *testing.T, xzb []byte, dict byte) []byte {
	t.Helper()
	b := bytes.Clone(xzb)
	n := (int(b[12]) + 1) * 4
	h := b[12 : 12+n]
	i := bytes.Index(h, []byte{0x21, 0x01})
	if i < 0 {
		t.Fatal("no LZMA2 filter in the first block header")
	}
	h[i+2] = dict
	binary.LittleEndian.PutUint32(h[n-4:], crc32.ChecksumIEEE(h[:n-4]))
	return b
}
