package imagefetch

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// layerNamesForFuzz applies two OCI layers into dst the way unpack does: a
// fixed lower one (files, a directory, a symlink to outside, the host dir
// beside the rootfs) and one whose entries are named by names (one per
// line) with the types kinds picks. Entries the tar writer itself refuses
// are left out.
func layerNamesForFuzz(t *testing.T, dst, outside, names string, kinds []byte) error {
	t.Helper()
	x, err := newExtractor(context.Background(), dst, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	x.chown = false
	x.whiteouts = true
	lower := tarBytes(t, []entry{
		{Name: "a", Type: tar.TypeDir}, {Name: "a/b", Body: "b"}, {Name: "keep", Body: "k"},
		{Name: "l", Type: tar.TypeSymlink, Link: outside},
	})
	if err := applyTarLayer(x, bytes.NewReader(lower)); err != nil {
		t.Fatalf("lower layer: %v", err)
	}
	// A relative link out, which no layer may write, as if the rootfs had
	// one anyway: entries through it must be refused too.
	if err := os.Symlink("../outside", filepath.Join(dst, "up")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, name := range strings.Split(names, "\n") {
		if i == 16 {
			break
		}
		var k byte
		if i < len(kinds) {
			k = kinds[i]
		}
		hdr := &tar.Header{Name: name, Mode: 0o644, ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg}
		switch k % 4 {
		case 1:
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		case 2:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, []string{"..", outside, "a/../..", "x"}[int(k/4)%4]
		case 3:
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, []string{"keep", "../outside/keep", "a/b", "l/keep"}[int(k/4)%4]
		}
		if tw.WriteHeader(hdr) != nil {
			continue
		}
	}
	if err := tw.Close(); err != nil {
		return nil // nothing the tar writer would write
	}
	return applyTarLayer(x, &buf)
}

// applyTarLayer is applyLayer's loop over an uncompressed tar stream.
func applyTarLayer(x *extractor, r io.Reader) error {
	x.startLayer()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var link string
		if hdr.Typeflag == tar.TypeLink {
			link = hdr.Linkname
		}
		if err := x.add(hdr.Name, hdr, hdr.Name, link, tr); err != nil {
			return err
		}
	}
}

// FuzzLayerEntryNames feeds an OCI layer arbitrary entry names ("..",
// whiteouts of "." and "..", absolute, long, NUL, through symlinks) over a
// lower layer: whatever the extractor accepts or refuses, nothing outside
// the rootfs is touched (the rootfs's parent keeps exactly the rootfs and a
// host dir, whose file keeps its content). make test runs the seeds; to
// fuzz:
//
//	go test -tags containers_image_openpgp -run XXX -fuzz FuzzLayerEntryNames -fuzzminimizetime 5x ./pkg/imagefetch/
func FuzzLayerEntryNames(f *testing.F) {
	long := strings.Repeat("d/", 200) + "f"
	for _, seed := range []struct {
		names string
		kinds []byte
	}{
		{"..", nil},
		{".wh..", nil},
		{".wh...", nil},
		{"a/.wh...", nil},
		{"a/.wh..", nil},
		{"a/b/.wh...\nkeep", nil},
		{".wh..wh..opq", nil},
		{"a/.wh..wh..opq\na/c", []byte{0, 0}},
		{".wh..wh.x", nil},
		{"/abs", nil},
		{"/../../x", nil},
		{"./../x", nil},
		{"a/../../x", nil},
		{long, nil},
		{strings.Repeat("x", 300), nil},
		{"a\x00b", nil},
		{".wh.\x00", nil},
		{"l/keep", nil},
		{"l/.wh.keep", nil},
		{"l/.wh..wh..opq", nil},
		{"up/.wh.keep", nil},
		{"up/x", nil},
		{"s\ns/x", []byte{2, 0}},
		{"h", []byte{7}},
		{"a\na/.wh..", []byte{1, 0}},
		{".", []byte{2}},
		{"", []byte{1}},
	} {
		f.Add(seed.names, seed.kinds)
	}
	f.Fuzz(func(t *testing.T, names string, kinds []byte) {
		base := t.TempDir()
		dst, outside := filepath.Join(base, "rootfs"), filepath.Join(base, "outside")
		for _, d := range []string{dst, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		keep := filepath.Join(outside, "keep")
		if err := os.WriteFile(keep, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := layerNamesForFuzz(t, dst, outside, names, kinds)
		ents, rerr := os.ReadDir(base)
		if rerr != nil {
			t.Fatalf("the rootfs's parent is gone: %v (layer: %v)", rerr, err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if strings.Join(got, ",") != "outside,rootfs" {
			t.Fatalf("the rootfs's parent holds %v (layer: %v)", got, err)
		}
		if o, _ := os.ReadDir(outside); len(o) != 1 {
			t.Fatalf("the host dir beside the rootfs changed: %v (layer: %v)", o, err)
		}
		if b, rerr := os.ReadFile(keep); rerr != nil || string(b) != "keep" {
			t.Fatalf("the host file beside the rootfs changed: %q, %v (layer: %v)", b, rerr, err)
		}
	})
}

// TestWhiteoutOfDotsRefused: a layer whose whiteout names its own
// directory or its parent (".wh..", ".wh...") is refused as hostile, and
// the rootfs's parent and the marker's directory stay.
func TestWhiteoutOfDotsRefused(t *testing.T) {
	for _, name := range []string{".wh...", ".wh..", "a/.wh...", "a/.wh..", ".wh..wh.plnk"} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			dst, outside := filepath.Join(base, "rootfs"), filepath.Join(base, "outside")
			for _, d := range []string{dst, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := layerNamesForFuzz(t, dst, outside, name, nil)
			if !errors.Is(err, ErrHostile) {
				t.Errorf("%v, want ErrHostile", err)
			}
			for _, p := range []string{base, outside, filepath.Join(dst, "a", "b"), filepath.Join(dst, "keep")} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
		})
	}
}
