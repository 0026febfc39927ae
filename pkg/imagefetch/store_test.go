package imagefetch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrashSafety simulates a fetch killed half-way (a .tmp- dir with a
// partial rootfs, even a partial image.json) and an image dir that lost its
// image.json: neither is an image, the temp dir is removed by New, and the
// next fetch writes the image properly.
func TestCrashSafety(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, t.TempDir(), "test.aci", testACI(t))
	f := newTestFetcher(t, Options{Dir: dir})
	img, err := f.Fetch(context.Background(), "file://"+p)
	if err != nil {
		t.Fatal(err)
	}
	id := img.ID
	if err := f.Remove(id); err != nil {
		t.Fatal(err)
	}

	leftover := filepath.Join(dir, ".tmp-aci-deadbeef")
	os.MkdirAll(filepath.Join(leftover, "rootfs", "bin"), 0o755)
	os.WriteFile(filepath.Join(leftover, "image.json"), []byte(`{"id":"`+id+`"`), 0o644)
	// An image directory without image.json (e.g. made by hand, or a
	// crash in a store written by something else).
	os.MkdirAll(filepath.Join(dir, id, "rootfs", "half"), 0o755)

	f2 := newTestFetcher(t, Options{Dir: dir})
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("leftover temp dir not cleaned by New: %v", err)
	}
	if imgs, err := f2.List(); err != nil || len(imgs) != 0 {
		t.Fatalf("List = %v, %v; a dir without image.json is not an image", imgs, err)
	}
	if _, err := f2.Get(id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
	again, err := f2.Fetch(context.Background(), "file://"+p)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, again.Rootfs, testTree...)
	if _, err := os.Stat(filepath.Join(again.Rootfs, "half")); !os.IsNotExist(err) {
		t.Fatal("the half image's content survived into the real one")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Fatalf("temp dir left after a good fetch: %s", e.Name())
		}
	}
}

func TestGetRejectsBadIDs(t *testing.T) {
	f := newTestFetcher(t, Options{})
	for _, id := range []string{"", "..", "../etc", "sha512-abc", ".tmp-x", "refs.json"} {
		if _, err := f.Get(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%q) = %v, want ErrNotFound", id, err)
		}
		if err := f.Remove(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Remove(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestUnsupportedURIs(t *testing.T) {
	f := newTestFetcher(t, Options{})
	for _, uri := range []string{"ftp://x/y.aci", "file://host/x.aci", "file:relative.aci", "docker://UPPER/Case"} {
		if _, err := f.Fetch(context.Background(), uri); err == nil {
			t.Fatalf("%s accepted", uri)
		}
	}
}
