package imagefetch

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sentinel files outside the rootfs that hostile entries aim at.
func outsideState(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestHostileACI(t *testing.T) {
	okFile := entry{Name: "rootfs/ok", Body: "ok"}
	cases := []struct {
		name    string
		ents    []entry
		mention string // in the error: the refused entry's name, or what is wrong
		maxSize int64
	}{
		{name: "absolute path", ents: []entry{{Name: "/etc/evil", Body: "x"}}, mention: "/etc/evil"},
		{name: "dotdot after double slash", ents: []entry{{Name: "rootfs//../../evil", Body: "x"}}, mention: "rootfs//../../evil"},
		{name: "dotdot escape", ents: []entry{{Name: "rootfs/../../evil", Body: "x"}}, mention: "rootfs/../../evil"},
		{name: "dotdot escape deep", ents: []entry{{Name: "rootfs/a/../../../evil", Body: "x"}}, mention: "rootfs/a/../../../evil"},
		{name: "relative symlink escaping", ents: []entry{{Name: "rootfs/esc", Type: tar.TypeSymlink, Link: "../../../../etc"}}, mention: "rootfs/esc"},
		{name: "write through absolute symlink", ents: []entry{
			{Name: "rootfs/etcl", Type: tar.TypeSymlink, Link: "/etc"},
			{Name: "rootfs/etcl/evil", Body: "x"},
		}, mention: "rootfs/etcl/evil"},
		{name: "write through symlink to outside dir", ents: []entry{
			{Name: "rootfs/d", Type: tar.TypeDir},
			{Name: "rootfs/d/up", Type: tar.TypeSymlink, Link: "/tmp"},
			{Name: "rootfs/d/up/evil", Body: "x"},
		}, mention: "rootfs/d/up/evil"},
		{name: "hardlink outside", ents: []entry{{Name: "rootfs/hl", Type: tar.TypeLink, Link: "/etc/passwd"}}, mention: "rootfs/hl"},
		{name: "hardlink dotdot", ents: []entry{{Name: "rootfs/hl", Type: tar.TypeLink, Link: "rootfs/../../etc/passwd"}}, mention: "rootfs/hl"},
		{name: "hardlink outside rootfs dir", ents: []entry{{Name: "rootfs/hl", Type: tar.TypeLink, Link: "manifest"}}, mention: "rootfs/hl"},
		{name: "hardlink through symlink", ents: []entry{
			{Name: "rootfs/etcl", Type: tar.TypeSymlink, Link: "/etc"},
			{Name: "rootfs/hl", Type: tar.TypeLink, Link: "rootfs/etcl/passwd"},
		}, mention: "rootfs/hl"},
		{name: "char device", ents: []entry{{Name: "rootfs/null", Type: tar.TypeChar}}, mention: "rootfs/null"},
		{name: "block device", ents: []entry{{Name: "rootfs/sda", Type: tar.TypeBlock}}, mention: "rootfs/sda"},
		{name: "fifo", ents: []entry{{Name: "rootfs/fifo", Type: tar.TypeFifo}}, mention: "rootfs/fifo"},
		{name: "over size cap", ents: []entry{{Name: "rootfs/big", Body: strings.Repeat("x", 5000)}}, mention: "over the 4096-byte limit", maxSize: 4096},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			store := filepath.Join(base, "store")
			outside := filepath.Join(base, "outside")
			os.MkdirAll(outside, 0o755)
			before := outsideState(t, outside)
			ents := append([]entry{{Name: "manifest", Body: testManifest}, {Name: "rootfs", Type: tar.TypeDir}, okFile}, c.ents...)
			for i := range ents {
				// Aim absolute/escaping links at our own outside dir where
				// it matters, so a failure would be visible there.
				ents[i].Link = strings.Replace(ents[i].Link, "/tmp", outside, 1)
			}
			p := writeFile(t, base, "evil.aci", tarBytes(t, ents))
			f := newTestFetcher(t, Options{Dir: store, MaxSize: c.maxSize})
			_, err := f.Fetch(context.Background(), "file://"+p)
			if err == nil {
				t.Fatal("hostile ACI accepted")
			}
			if !strings.Contains(err.Error(), strings.TrimSuffix(c.mention, "/")) {
				t.Fatalf("error %q does not mention %q", err, c.mention)
			}
			if imgs, _ := f.List(); len(imgs) != 0 {
				t.Fatalf("hostile image stored: %+v", imgs)
			}
			if after := outsideState(t, outside); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Fatalf("something was written outside: %v", after)
			}
			for _, p := range []string{"/evil", "/etc/evil", filepath.Join(base, "evil")} {
				if _, err := os.Lstat(p); err == nil {
					t.Fatalf("%s was written", p)
				}
			}
			// Nothing but the refs/containers files remains in the store.
			ents2, _ := os.ReadDir(store)
			for _, e := range ents2 {
				if strings.HasPrefix(e.Name(), tmpPrefix) {
					t.Fatalf("temp dir left behind: %s", e.Name())
				}
			}
		})
	}
}

// TestHostileEntriesNamed checks that refusals are ErrHostile (callers and
// logs can tell an attack from a network error).
func TestHostileIsErrHostile(t *testing.T) {
	p := writeFile(t, t.TempDir(), "evil.aci", tarBytes(t, []entry{
		{Name: "manifest", Body: testManifest}, {Name: "rootfs", Type: tar.TypeDir},
		{Name: "rootfs/null", Type: tar.TypeChar},
	}))
	f := newTestFetcher(t, Options{})
	_, err := f.Fetch(context.Background(), "file://"+p)
	if !errors.Is(err, ErrHostile) {
		t.Fatalf("%v, want ErrHostile", err)
	}
}

// TestBenignSymlinksAccepted: absolute symlinks and in-rootfs relative
// ones are normal; writing through an in-rootfs relative symlink is fine.
func TestBenignSymlinksAccepted(t *testing.T) {
	ents := aciEntries(testManifest, []entry{
		{Name: "usr", Type: tar.TypeDir},
		{Name: "usr/bin", Type: tar.TypeDir},
		{Name: "bin", Type: tar.TypeSymlink, Link: "usr/bin"},
		{Name: "bin/tool", Body: "t"},
		{Name: "sh", Type: tar.TypeSymlink, Link: "/bin/busybox"},
		{Name: "dangling", Type: tar.TypeSymlink, Link: "nowhere/../x"},
	})
	p := writeFile(t, t.TempDir(), "ok.aci", tarBytes(t, ents))
	f := newTestFetcher(t, Options{})
	img, err := f.Fetch(context.Background(), "file://"+p)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, img.Rootfs, "usr d", "usr/bin d", "usr/bin/tool f", "bin l->usr/bin", "sh l->/bin/busybox", "dangling l->nowhere/../x")
}

// readACIForFuzz runs the ACI reader on data with dst as the rootfs, the
// way importACI does, without a store.
func readACIForFuzz(data []byte, dst string) error {
	info, err := inspectACI(context.Background(), bytes.NewReader(data), 1<<20)
	if err != nil {
		return err
	}
	x, err := newExtractor(context.Background(), dst, 1<<20)
	if err != nil {
		return err
	}
	x.chown = false
	return extractACI(bytes.NewReader(data), x, info.ID)
}

// FuzzReadACI feeds arbitrary bytes to the ACI reader: it must never panic
// and never write outside the target directory. make test runs the seeds.
// To fuzz, bound minimisation (this package's binary is large, so the
// engine's default minimisation of a new input takes minutes and looks like
// a stall):
//
//	go test -tags containers_image_openpgp -run XXX -fuzz FuzzReadACI -fuzzminimizetime 5x ./pkg/imagefetch/
func FuzzReadACI(f *testing.F) {
	f.Add(tarBytes(f, aciEntries(testManifest, testRootfs)))
	f.Add(testACI(f))
	f.Add(compress(f, tarBytes(f, aciEntries(testManifest, testRootfs)), "xz"))
	f.Add(compress(f, tarBytes(f, aciEntries(testManifest, testRootfs)), "bzip2"))
	f.Add(tarBytes(f, []entry{{Name: "manifest", Body: testManifest}, {Name: "rootfs", Type: tar.TypeDir},
		{Name: "rootfs/l", Type: tar.TypeSymlink, Link: "/"}, {Name: "rootfs/l/x", Body: "x"}}))
	f.Add(tarBytes(f, []entry{{Name: "manifest", Body: testManifest}, {Name: "rootfs", Type: tar.TypeDir},
		{Name: "rootfs/../x", Body: "x"}}))
	f.Add(tarBytes(f, []entry{{Name: "manifest", Body: "{}"}}))
	f.Add([]byte{})
	f.Add([]byte("BZh9"))
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		dst := filepath.Join(base, "rootfs")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = readACIForFuzz(data, dst)
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != "rootfs" {
			t.Fatalf("wrote outside the rootfs: %v", ents)
		}
	})
}

// TestReadACIMutations runs the ACI reader over seeded random corruptions
// of valid ACIs (byte flips, truncations) in every compression: it must
// return, never panic, and never write outside the target directory. It
// complements FuzzReadACI, whose seed corpus alone runs in make test.
func TestReadACIMutations(t *testing.T) {
	raw := tarBytes(t, aciEntries(testManifest, testRootfs))
	seeds := [][]byte{raw, compress(t, raw, "gzip"), compress(t, raw, "xz"), compress(t, raw, "bzip2")}
	r := rand.New(rand.NewSource(1))
	base := t.TempDir()
	for i := 0; i < 400; i++ {
		d := append([]byte(nil), seeds[i%len(seeds)]...)
		if r.Intn(4) == 0 {
			d = d[:r.Intn(len(d))]
		} else {
			for j := 0; j < 1+r.Intn(4); j++ {
				d[r.Intn(len(d))] = byte(r.Intn(256))
			}
		}
		dir := filepath.Join(base, strconv.Itoa(i))
		dst := filepath.Join(dir, "rootfs")
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = readACIForFuzz(d, dst)
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 1 {
			t.Fatalf("mutation %d wrote outside the rootfs: %v %v", i, ents, err)
		}
	}
}

func TestHugeManifestRefused(t *testing.T) {
	big := `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"x/y","annotations":[{"name":"a","value":"` + strings.Repeat("a", 2<<20) + `"}]}`
	p := writeFile(t, t.TempDir(), "big.aci", compress(t, tarBytes(t, []entry{{Name: "manifest", Body: big}, {Name: "rootfs", Type: tar.TypeDir}}), "gzip"))
	f := newTestFetcher(t, Options{})
	_, err := f.Fetch(context.Background(), "file://"+p)
	if err == nil || !strings.Contains(err.Error(), "manifest is") {
		t.Fatalf("%v, want the manifest size refused", err)
	}
}

// TestHostileOCILayer runs hostile entries through the OCI layer path,
// which has no appc layout validation in front of it.
func TestHostileOCILayer(t *testing.T) {
	cases := map[string][]entry{
		"root replaced by symlink": {{Name: "./", Type: tar.TypeSymlink, Link: "OUTSIDE"}, {Name: "passwd", Body: "x"}},
		"root replaced by file":    {{Name: ".", Body: "x"}},
		"absolute":                 {{Name: "/evil", Body: "x"}},
		"dotdot":                   {{Name: "../evil", Body: "x"}},
		"through symlink":          {{Name: "l", Type: tar.TypeSymlink, Link: "OUTSIDE"}, {Name: "l/evil", Body: "x"}},
		"whiteout through symlink": {{Name: "l", Type: tar.TypeSymlink, Link: "OUTSIDE"}, {Name: "l/.wh.keep", Body: ""}},
		"opaque through symlink":   {{Name: "l", Type: tar.TypeSymlink, Link: "OUTSIDE"}, {Name: "l/.wh..wh..opq", Body: ""}},
		"hardlink outside":         {{Name: "h", Type: tar.TypeLink, Link: "../OUTSIDE/keep"}},
		"device":                   {{Name: "null", Type: tar.TypeChar}},
	}
	for name, ents := range cases {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644)
			for i := range ents {
				ents[i].Link = strings.Replace(ents[i].Link, "OUTSIDE", outside, 1)
			}
			dir := writeLayout(t, filepath.Join(base, "layout"), ociImageFromLayers(t, tarBytes(t, ents)))
			f := newTestFetcher(t, Options{Dir: filepath.Join(base, "store")})
			_, err := f.Fetch(context.Background(), "file://"+dir)
			if !errors.Is(err, ErrHostile) {
				t.Fatalf("%v, want ErrHostile", err)
			}
			got := outsideState(t, outside)
			if len(got) != 2 {
				t.Fatalf("outside dir changed: %v", got)
			}
		})
	}
}

func TestEntryCountCap(t *testing.T) {
	dst := t.TempDir()
	x, err := newExtractor(context.Background(), dst, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	x.maxEntries = 3
	raw := tarBytes(t, aciEntries(testManifest, []entry{{Name: "a", Body: "1"}, {Name: "b", Body: "2"}, {Name: "c", Body: "3"}, {Name: "d", Body: "4"}}))
	err = extractACI(bytes.NewReader(raw), x, "")
	if !errors.Is(err, ErrHostile) || !strings.Contains(err.Error(), "more than 3 entries") {
		t.Fatalf("%v, want the entry cap refused", err)
	}
}
