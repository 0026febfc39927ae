package imagefetch

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
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

// decompress detects gzip, bzip2, xz or a plain tar by magic bytes and
// returns the uncompressed stream. appc's own aci.NewCompressedReader shells
// out to xz and calls log.Fatalf when it is missing, so it is not used.
func decompress(r io.Reader) (io.Reader, string, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(6)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, "", err
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, "", fmt.Errorf("gzip: %w", err)
		}
		return zr, "gzip", nil
	case bytes.HasPrefix(magic, []byte("BZh")):
		return bzip2.NewReader(br), "bzip2", nil
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		zr, err := xz.NewReader(br)
		if err != nil {
			return nil, "", fmt.Errorf("xz: %w", err)
		}
		return zr, "xz", nil
	default:
		return br, "none", nil
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
// aci.ValidateArchive. maxBytes caps the uncompressed size.
func inspectACI(r io.Reader, maxBytes int64) (*aciInfo, error) {
	ur, comp, err := decompress(r)
	if err != nil {
		return nil, err
	}
	h := sha512.New()
	lr := &capReader{r: ur, max: maxBytes}
	tee := io.TeeReader(lr, h)

	// Capture the manifest while appc validates, so there is one pass.
	var manifest []byte
	var nameErr error // first entry whose name is hostile: a better message than appc's
	pr, pw := io.Pipe()
	mtee := io.TeeReader(tee, pw)
	done := make(chan error, 1)
	go func() {
		tr := tar.NewReader(pr)
		for {
			hdr, err := tr.Next()
			if err != nil {
				done <- nil
				_, _ = io.Copy(io.Discard, pr)
				return
			}
			if _, err := cleanName(hdr.Name); err != nil && nameErr == nil {
				nameErr = err
			}
			if path.Clean(hdr.Name) == aci.ManifestFile && hdr.Size > maxManifestSize {
				// appc's validator would buffer it whole: stop the stream.
				tooBig := fmt.Errorf("invalid ACI: manifest is %d bytes, more than %d", hdr.Size, maxManifestSize)
				if nameErr == nil {
					nameErr = tooBig
				}
				pr.CloseWithError(tooBig)
				done <- nil
				return
			}
			if path.Clean(hdr.Name) == aci.ManifestFile && manifest == nil {
				b, err := io.ReadAll(io.LimitReader(tr, maxManifestSize+1))
				if err != nil {
					done <- nil
					_, _ = io.Copy(io.Discard, pr)
					return
				}
				manifest = b
			}
		}
	}()
	verr := func() (err error) {
		defer func() {
			// appc's validation must never take the daemon down.
			if p := recover(); p != nil {
				err = fmt.Errorf("invalid ACI: %v", p)
			}
		}()
		return aci.ValidateArchive(tar.NewReader(mtee))
	}()
	// Hash the trailing padding too: the ID covers the whole tar stream.
	_, cerr := io.Copy(io.Discard, mtee)
	pw.Close()
	<-done
	if lr.over {
		return nil, fmt.Errorf("%w: uncompressed image is larger than the %d-byte limit", ErrHostile, maxBytes)
	}
	if nameErr != nil {
		return nil, nameErr
	}
	if verr != nil {
		return nil, fmt.Errorf("invalid ACI: %w", verr)
	}
	if cerr != nil {
		return nil, fmt.Errorf("reading ACI: %w", cerr)
	}
	if len(manifest) > maxManifestSize {
		return nil, fmt.Errorf("invalid ACI: manifest larger than %d bytes", maxManifestSize)
	}
	var im schema.ImageManifest
	if err := im.UnmarshalJSON(manifest); err != nil {
		return nil, fmt.Errorf("invalid ACI manifest: %w", err)
	}
	return &aciInfo{
		ID:          "sha512-" + hex.EncodeToString(h.Sum(nil)),
		Compression: comp,
		Manifest:    &im,
		Size:        lr.n,
	}, nil
}

// extractACI writes the rootfs/ entries of an ACI under x's root.
func extractACI(r io.Reader, x *extractor) error {
	ur, _, err := decompress(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(&capReader{r: ur, max: x.maxBytes + 64<<20})
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading ACI: %w", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		// Names are checked before the rootfs prefix is stripped so that
		// "rootfs/../x" is refused rather than silently dropped.
		rel, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if rel == aci.ManifestFile || rel == "" {
			continue
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
		if err := x.add(hdr.Name, hdr, name, link, tr); err != nil {
			return err
		}
	}
	return x.finish()
}

// capReader counts bytes and stops with an error past max.
type capReader struct {
	r    io.Reader
	max  int64
	n    int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
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
