package imagefetch

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/kurma-project/kurma/internal/testutil"
)

// TestSourcesSameImage fetches the project's cni-netplugin image (built by
// `make images` as an ACI and an OCI layout) from file://, https://, appc
// discovery, docker:// and oci-archive:// (podman's archive of it), each
// into its own store, and checks they unpack to the same rootfs and app.
func TestSourcesSameImage(t *testing.T) {
	aciFile := testutil.BuiltImage(t, "cni-netplugin.aci")
	layoutDir := testutil.BuiltImage(t, "cni-netplugin")
	archive := podmanArchive(t, layoutDir, "kurma.dev/cni-netplugin:v1")
	aciBody, err := os.ReadFile(aciFile)
	if err != nil {
		t.Fatal(err)
	}

	srv := newDiscoveryServer(t, true)
	srv.serveTemplate("kurma.dev")
	const path = "/kurma.dev/cni-netplugin-v1-linux-amd64.aci"
	srv.put(path, aciBody)

	reg := newTestRegistry(t)
	idx, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	ociImg, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	reg.push(t, "kurma/cni-netplugin:v1", ociImg)

	sources := map[string]string{
		"file ACI":       "file://" + aciFile,
		"file OCI":       "file://" + layoutDir,
		"https ACI":      srv.URL + path,
		"appc discovery": "kurma.dev/cni-netplugin:v1",
		"docker":         "docker://" + reg.host + "/kurma/cni-netplugin:v1",
		"oci-archive":    "oci-archive://" + archive,
	}
	var refTree []string
	var refApp App
	var refName string
	for _, name := range []string{"file ACI", "file OCI", "https ACI", "appc discovery", "docker", "oci-archive"} {
		f := newTestFetcher(t, Options{HTTPClient: srv.client, InsecureRegistries: []string{reg.host}})
		img, err := f.Fetch(context.Background(), sources[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tree := listTree(t, img.Rootfs)
		if len(tree) < 5 {
			t.Fatalf("%s: rootfs has only %v", name, tree)
		}
		if refTree == nil {
			refTree, refApp, refName = tree, img.App, name
			continue
		}
		if !reflect.DeepEqual(tree, refTree) {
			t.Fatalf("%s rootfs differs from %s:\n%s\nvs\n%s", name, refName, strings.Join(tree, "\n"), strings.Join(refTree, "\n"))
		}
		if !reflect.DeepEqual(img.App.Exec, refApp.Exec) {
			t.Fatalf("%s exec %q, %s exec %q", name, img.App.Exec, refName, refApp.Exec)
		}
	}
}
