package imagefetch

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/appc/spec/aci"
	"github.com/appc/spec/schema"
	"github.com/ulikunitz/xz"
)

// maxManifestSize bounds the ACI manifest read into memory.
const maxManifestSize = 1 << 20

// decompressed is an uncompressed stream over a compressed source.
type decompressed struct {
	io.Reader
	Kind string // gzip, bzip2, xz or none
	src  *bufio.Reader
}

// decompress detects gzip, bzip2, xz or a plain tar by magic bytes and
// returns the uncompressed stream. appc's own aci.NewCompressedReader shells
// out to xz and calls log.Fatalf when it is missing, so it is not used.
// gzip and xz read one stream only: what follows it is refused by end.
func decompress(r io.Reader) (*decompressed, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(6)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	d := &decompressed{Reader: br, Kind: "none", src: br}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		zr.Multistream(false)
		d.Reader, d.Kind = zr, "gzip"
	case bytes.HasPrefix(magic, []byte("BZh")):
		d.Reader, d.Kind = bzip2.NewReader(br), "bzip2"
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		zr, err := xz.ReaderConfig{SingleStream: true}.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("xz: %w", err)
		}
		d.Reader, d.Kind = zr, "xz"
	}
	return d, nil
}

// end checks, once the uncompressed stream has been read to its end, that
// nothing follows the compressed stream (a second gzip member, garbage).
func (d *decompressed) end() error {
	if d.Kind == "none" {
		return nil
	}
	if _, err := d.src.Peek(1); !errors.Is(err, io.EOF) {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: data after the end of the %s stream", ErrHostile, d.Kind)
	}
	return nil
}

// maxTarPadding bounds the zero bytes accepted after a tar's end-of-archive
// marker: tar writers pad to whole records (GNU tar: 10 KiB).
const maxTarPadding = 1 << 20

// checkTarTail reads what follows a tar's end-of-archive marker in r and
// refuses anything but zero padding, and more than maxTarPadding of it.
func checkTarTail(r io.Reader) error {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		if len(bytes.Trim(buf[:m], "\x00")) != 0 {
			return fmt.Errorf("%w: data after the tar's end-of-archive marker", ErrHostile)
		}
		n += int64(m)
		if n > maxTarPadding {
			return fmt.Errorf("%w: more than %d bytes of padding after the tar's end-of-archive marker", ErrHostile, maxTarPadding)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// aciInfo is what a validation pass over an ACI learns.
type aciInfo struct {
	ID          string // sha512-<128 hex> of the uncompressed tar
	Compression string
	Manifest    *schema.ImageManifest
	Size        int64 // uncompressed tar bytes
}

// inspectACI reads the whole ACI once: it hashes the uncompressed tar for
// the image ID and validates layout and manifest with appc's
// aci.ValidateArchive. maxBytes caps the uncompressed size; ctx is checked
// as the stream is read.
func inspectACI(ctx context.Context, r io.Reader, maxBytes int64) (*aciInfo, error) {
	d, err := decompress(r)
	if err != nil {
		return nil, err
	}
	h := sha512.New()
	lr := &capReader{r: d, max: maxBytes, ctx: ctx}
	tee := io.TeeReader(lr, h)

	// Capture the manifest while appc validates, so there is one pass:
	// everything the validator reads is copied to scanACIEntries.
	pr, pw := io.Pipe()
	mtee := io.TeeReader(tee, pw)
	done := make(chan aciScan, 1)
	go func() { done <- scanACIEntries(pr) }()
	verr := validateACIArchive(mtee)
	// The ID covers the whole tar stream, its trailing padding too.
	var cerr error
	if verr == nil {
		cerr = checkTarTail(mtee)
	}
	pw.Close()
	scan := <-done
	if err := inspectError(ctx, lr, maxBytes, scan.nameErr, verr, cerr); err != nil {
		return nil, err
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	im, err := parseACIManifest(scan.manifest)
	if err != nil {
		return nil, err
	}
	return &aciInfo{
		ID:          "sha512-" + hex.EncodeToString(h.Sum(nil)),
		Compression: d.Kind,
		Manifest:    im,
		Size:        lr.n,
	}, nil
}

// aciScan is what scanACIEntries learns from the entry headers.
type aciScan struct {
	manifest []byte // the first manifest entry's content
	// nameErr is the first entry whose name is hostile, or why the scan
	// stopped the stream: a better message than appc's.
	nameErr error
}

// scanACIEntries reads the copy of the tar stream the validator reads,
// keeping the manifest and the first hostile name. It stops the stream
// (closing pr with the reason) past defaultMaxEntries entries or at a
// manifest over maxManifestSize, where appc's validator would hold it
// all; otherwise it drains pr so the validator never blocks on the pipe.
func scanACIEntries(pr *io.PipeReader) aciScan {
	var s aciScan
	tr := tar.NewReader(pr)
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if err != nil {
			_, _ = io.Copy(io.Discard, pr)
			return s
		}
		if _, err := cleanName(hdr.Name); err != nil && s.nameErr == nil {
			s.nameErr = err
		}
		if stop := aciScanLimit(hdr, entries); stop != nil {
			if s.nameErr == nil {
				s.nameErr = stop
			}
			pr.CloseWithError(stop)
			return s
		}
		if path.Clean(hdr.Name) == aci.ManifestFile && s.manifest == nil {
			b, err := io.ReadAll(io.LimitReader(tr, maxManifestSize+1))
			if err != nil {
				_, _ = io.Copy(io.Discard, pr)
				return s
			}
			s.manifest = b
		}
	}
}

// aciScanLimit is why the entry hdr, with entries before it, must stop
// the stream, or nil: past the entry cap, or a manifest too large to read.
func aciScanLimit(hdr *tar.Header, entries int) error {
	var stop error
	if entries >= defaultMaxEntries {
		stop = hostile(hdr.Name, "more than %d entries", defaultMaxEntries)
	}
	if path.Clean(hdr.Name) == aci.ManifestFile && hdr.Size > maxManifestSize {
		stop = fmt.Errorf("invalid ACI: manifest is %d bytes, more than %d", hdr.Size, maxManifestSize)
	}
	return stop
}

// validateACIArchive runs appc's aci.ValidateArchive over r, turning a
// panic in it into an error: appc's validation must never take the daemon
// down.
func validateACIArchive(r io.Reader) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("invalid ACI: %v", p)
		}
	}()
	return aci.ValidateArchive(tar.NewReader(r))
}

// inspectError picks the error inspectACI reports, most telling first:
// the size cap, the context, a hostile name or stopped stream, appc's
// verdict, then what follows the tar.
func inspectError(ctx context.Context, lr *capReader, maxBytes int64, nameErr, verr, cerr error) error {
	switch {
	case lr.over:
		return fmt.Errorf("%w: uncompressed image is larger than the %d-byte limit", ErrHostile, maxBytes)
	case ctx.Err() != nil:
		return ctx.Err()
	case nameErr != nil:
		return nameErr
	case verr != nil:
		return fmt.Errorf("invalid ACI: %w", verr)
	case cerr != nil:
		return fmt.Errorf("reading ACI: %w", cerr)
	}
	return nil
}

// parseACIManifest decodes the manifest the scan captured.
func parseACIManifest(manifest []byte) (*schema.ImageManifest, error) {
	if len(manifest) > maxManifestSize {
		return nil, fmt.Errorf("invalid ACI: manifest larger than %d bytes", maxManifestSize)
	}
	var im schema.ImageManifest
	if err := im.UnmarshalJSON(manifest); err != nil {
		return nil, fmt.Errorf("invalid ACI manifest: %w", err)
	}
	return &im, nil
}

// extractACI writes the rootfs/ entries of an ACI under x's root, hashing
// the uncompressed tar as it goes: when the hash is not wantID (the ID that
// was verified), the rootfs must not be committed and an error wrapping
// ErrDigestMismatch says so.
func extractACI(r io.Reader, x *extractor, wantID string) error {
	d, err := decompress(r)
	if err != nil {
		return err
	}
	h := sha512.New()
	cr := x.stream(d)
	defer cr.finish()
	ur := io.TeeReader(cr, h)
	tr := tar.NewReader(ur)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading ACI: %w", err)
		}
		if err := extractACIEntry(hdr, tr, x); err != nil {
			return err
		}
	}
	if err := checkTarTail(ur); err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	if got := "sha512-" + hex.EncodeToString(h.Sum(nil)); got != wantID {
		return fmt.Errorf("%w: the ACI unpacked has ID %s, the one verified %s", ErrDigestMismatch, got, wantID)
	}
	return x.finish()
}

// extractACIEntry writes one ACI entry: the manifest and the rootfs
// directory itself are skipped, anything outside rootfs/ is refused.
func extractACIEntry(hdr *tar.Header, tr *tar.Reader, x *extractor) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	// Names are checked before the rootfs prefix is stripped so that
	// "rootfs/../x" is refused rather than silently dropped.
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if rel == aci.ManifestFile || rel == "" {
		return nil
	}
	if rel != aci.RootfsDir && !strings.HasPrefix(rel, aci.RootfsDir+"/") {
		return fmt.Errorf("invalid ACI: entry %q is outside rootfs/", hdr.Name)
	}
	name := strings.TrimPrefix(strings.TrimPrefix(rel, aci.RootfsDir), "/")
	var link string
	if hdr.Typeflag == tar.TypeLink {
		l, err := cleanName(hdr.Linkname)
		if err != nil {
			return hostile(hdr.Name, "hard link target %q: %v", hdr.Linkname, err)
		}
		if !strings.HasPrefix(l, aci.RootfsDir+"/") {
			return hostile(hdr.Name, "hard link target %q is outside the rootfs", hdr.Linkname)
		}
		link = strings.TrimPrefix(l, aci.RootfsDir+"/")
	}
	return x.add(hdr.Name, hdr, name, link, tr)
}

// capReader counts bytes and stops with an error past max, or when ctx
// (if any) ends. done, if set, is given the count by finish.
type capReader struct {
	r    io.Reader
	max  int64
	ctx  context.Context
	done func(n int64)
	n    int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.ctx != nil {
		if err := c.ctx.Err(); err != nil {
			return 0, err
		}
	}
	if c.n >= c.max {
		// Allow reading EOF exactly at the cap.
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			c.over = true
			return 0, fmt.Errorf("%w: more than %d bytes", ErrHostile, c.max)
		}
		return 0, err
	}
	if int64(len(p)) > c.max-c.n {
		p = p[:c.max-c.n]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// finish reports the count to done.
func (c *capReader) finish() {
	if c.done != nil {
		c.done(c.n)
		c.done = nil
	}
}
