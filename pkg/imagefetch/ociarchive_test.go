package imagefetch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// podmanArchive is layoutDir's image as podman saves it in an OCI archive
// (podman save --format oci-archive), tagged tag, made by a podman of its
// own (pull from the layout, tag, save): a real archive, as users make.
func podmanArchive(t *testing.T, layoutDir, tag string) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	p, err := testutil.NewPodman(filepath.Join(dir, "podman"), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		if err := p.Cleanup(ctx); err != nil {
			t.Error(err)
		}
	})
	id, err := p.Run(ctx, "pull", "-q", "oci:"+layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(ctx, "tag", id, tag); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "cni-netplugin.tar")
	if _, err := p.Run(ctx, "save", "--format", "oci-archive", "-o", out, tag); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOCIArchive: oci-archive:// takes the archive's only image, or the
// one its #ref name names (as podman save and skopeo write it), named and
// versioned after that ref; a ref the archive lacks, a file that is no
// OCI archive and an image_name to check are refused, each saying why;
// an unchanged archive is not read again.
func TestOCIArchive(t *testing.T) {
	archive := podmanArchive(t, testutil.BuiltImage(t, "cni-netplugin"), "kurma.dev/cni-netplugin:v1")
	f := newTestFetcher(t, Options{})
	ctx := context.Background()
	img, err := f.Fetch(ctx, "oci-archive://"+archive)
	if err != nil {
		t.Fatal(err)
	}
	if img.Format != "oci" || img.Source != "oci-archive://"+archive || len(img.App.Exec) == 0 || !isExecutableFile(filepath.Join(img.Rootfs, "opt/network/add")) {
		t.Errorf("image %+v, want the plugin image from the archive", img)
	}
	if img.Name != "kurma.dev/cni-netplugin" || img.Version != "v1" {
		t.Errorf("image %s:%s, want it named after its ref name kurma.dev/cni-netplugin:v1", img.Name, img.Version)
	}
	named, err := f.Fetch(ctx, "oci-archive://"+archive+"#kurma.dev/cni-netplugin:v1")
	if err != nil {
		t.Fatal(err)
	}
	if named.ID != img.ID {
		t.Errorf("by its ref name: %s, want %s", named.ID, img.ID)
	}
	again, err := f.Fetch(ctx, "oci-archive://"+archive)
	if err != nil || again.ID != img.ID {
		t.Errorf("fetched again: %v, %v", again, err)
	}

	if _, err := f.Fetch(ctx, "oci-archive://"+archive+"#kurma.dev/other:v1"); err == nil || !strings.Contains(err.Error(), "OCI archive "+archive) {
		t.Errorf("a ref the archive lacks: %v, want an error naming the archive", err)
	}
	aci := testutil.BuiltImage(t, "cni-netplugin.aci")
	if _, err := f.Fetch(ctx, "oci-archive://"+aci); err == nil || !strings.Contains(err.Error(), "is not an OCI archive") {
		t.Errorf("an ACI as oci-archive://: %v", err)
	}
	if _, err := f.Fetch(ctx, "oci-archive://"+archive, WithImageName("kurma.dev/cni-netplugin")); !errors.Is(err, ErrImageName) {
		t.Errorf("with an image name to check: %v, want ErrImageName", err)
	}
}

// isExecutableFile reports whether p is a regular file with an execute bit.
func isExecutableFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
