package imagefetch

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// testRegistry is an in-process registry on loopback, plain HTTP, counting
// blob downloads.
type testRegistry struct {
	*httptest.Server
	host      string
	blobGets  atomic.Int64
	manifests atomic.Int64
	// requireAuth makes it demand basic auth kurma:s3cret.
	requireAuth atomic.Bool
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.requireAuth.Load() {
			if u, p, ok := req.BasicAuth(); !ok || u != "kurma" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobGets.Add(1)
		}
		if strings.Contains(req.URL.Path, "/manifests/") {
			r.manifests.Add(1)
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	r.host = strings.TrimPrefix(r.URL, "http://")
	return r
}

func (r *testRegistry) push(t *testing.T, repoTag string, img v1.Image) v1.Hash {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDockerInsecureRegistryPolicy(t *testing.T) {
	reg := newTestRegistry(t)
	reg.push(t, "kurma/test:v1", ociImageFromLayers(t, tarBytes(t, testRootfs)))
	uri := "docker://" + reg.host + "/kurma/test:v1"

	strict := newTestFetcher(t, Options{})
	if _, err := strict.Fetch(context.Background(), uri); err == nil {
		t.Fatal("plain-HTTP registry not in insecure_registries was accepted")
	}
	if n := reg.blobGets.Load(); n != 0 {
		t.Fatalf("%d blobs fetched from a refused registry", n)
	}

	f := newTestFetcher(t, Options{InsecureRegistries: []string{reg.host}})
	img, err := f.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, img.Rootfs, testTree...)
	if got := strings.Join(img.App.Exec, " "); got != "/bin/plugin --serve" {
		t.Fatalf("exec %q", got)
	}
	if img.Name != reg.host+"/kurma/test" {
		t.Fatalf("name %q", img.Name)
	}
}

func TestDockerWhiteoutsAndDigestRef(t *testing.T) {
	reg := newTestRegistry(t)
	lower := tarBytes(t, []entry{
		{Name: "a", Type: tar.TypeDir},
		{Name: "a/keep", Body: "keep"},
		{Name: "a/gone", Body: "gone"},
		{Name: "b", Type: tar.TypeDir},
		{Name: "b/old1", Body: "1"},
		{Name: "b/sub", Type: tar.TypeDir},
		{Name: "b/sub/old2", Body: "2"},
		{Name: "c", Body: "c"},
		{Name: "d", Type: tar.TypeDir},
		{Name: "d/x", Body: "x"},
	})
	upper := tarBytes(t, []entry{
		{Name: "a/.wh.gone", Body: ""},
		{Name: "b", Type: tar.TypeDir},
		{Name: "b/new", Body: "new"},
		{Name: "b/.wh..wh..opq", Body: ""},
		{Name: ".wh.c", Body: ""},
		{Name: ".wh.d", Body: ""},
		{Name: "d", Body: "now a file"},
	})
	img := ociImageFromLayers(t, lower, upper)
	digest := reg.push(t, "kurma/layers:latest", img)
	f := newTestFetcher(t, Options{InsecureRegistries: []string{reg.host}})
	want := []string{"a d", "a/keep f", "b d", "b/new f", "d f"}

	got, err := f.Fetch(context.Background(), "docker://"+reg.host+"/kurma/layers")
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, got.Rootfs, want...)
	// The ID is the digest of the manifest as stored: containers/image
	// converts this Docker v2s2 manifest to OCI for the layout, so it is not
	// the registry's digest; a digest reference is still checked against
	// the registry's manifest by containers/image.

	// The same image by digest, in a fresh store.
	f2 := newTestFetcher(t, Options{InsecureRegistries: []string{reg.host}})
	byDigest, err := f2.Fetch(context.Background(), "docker://"+reg.host+"/kurma/layers@"+digest.String())
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, byDigest.Rootfs, want...)
	if byDigest.ID != got.ID {
		t.Fatalf("digest ref ID %s, tag ID %s", byDigest.ID, got.ID)
	}
}

func TestDockerFreshnessAndOffline(t *testing.T) {
	reg := newTestRegistry(t)
	reg.push(t, "kurma/test:v1", ociImageFromLayers(t, tarBytes(t, testRootfs)))
	dir := t.TempDir()
	opts := Options{Dir: dir, InsecureRegistries: []string{reg.host}}
	f := newTestFetcher(t, opts)
	uri := "docker://" + reg.host + "/kurma/test:v1"
	img, err := f.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	blobs := reg.blobGets.Load()
	again, err := f.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if n := reg.blobGets.Load(); n != blobs {
		t.Fatalf("unchanged tag: %d more blob downloads, want 0", n-blobs)
	}
	if again.ID != img.ID {
		t.Fatal("ID changed")
	}
	// The tag moves: the next fetch pulls the new image.
	reg.push(t, "kurma/test:v1", ociImageFromLayers(t, tarBytes(t, append(testRootfs[:2:2], entry{Name: "new", Body: "n"}))))
	moved, err := f.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if moved.ID == img.ID {
		t.Fatal("moved tag: still the old image")
	}
	// Registry gone: the stored image is used.
	reg.Close()
	f2 := newTestFetcher(t, opts)
	off, err := f2.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatalf("registry stopped, image stored: %v", err)
	}
	if off.ID != moved.ID {
		t.Fatalf("offline ID %s, want %s", off.ID, moved.ID)
	}
}

func TestDockerHubForm(t *testing.T) {
	ref, named, err := dockerRef("docker:///user/name:tag")
	if err != nil {
		t.Fatal(err)
	}
	if named.String() != "docker.io/user/name:tag" {
		t.Fatalf("docker:///user/name:tag → %s, want docker.io/user/name:tag", named)
	}
	_ = ref
	for in, want := range map[string]string{
		"docker://busybox":                                       "docker.io/library/busybox:latest",
		"docker://127.0.0.1:5000/a/b":                            "127.0.0.1:5000/a/b:latest",
		"docker://quay.io/x/y@sha256:" + strings.Repeat("a", 64): "quay.io/x/y@sha256:" + strings.Repeat("a", 64),
	} {
		_, n, err := dockerRef(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if n.String() != want {
			t.Fatalf("%s → %s, want %s", in, n, want)
		}
	}
}

// TestDockerAuthFile: credentials come from the standard auth file
// ($REGISTRY_AUTH_FILE here) and nowhere else.
func TestDockerAuthFile(t *testing.T) {
	reg := newTestRegistry(t)
	reg.push(t, "kurma/private:v1", ociImageFromLayers(t, tarBytes(t, testRootfs)))
	reg.requireAuth.Store(true)
	uri := "docker://" + reg.host + "/kurma/private:v1"
	opts := Options{InsecureRegistries: []string{reg.host}}

	t.Setenv("REGISTRY_AUTH_FILE", filepath.Join(t.TempDir(), "absent.json"))
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	if _, err := newTestFetcher(t, opts).Fetch(context.Background(), uri); err == nil {
		t.Fatal("pulled from an authenticated registry without credentials")
	}

	auth := filepath.Join(t.TempDir(), "auth.json")
	cred := base64.StdEncoding.EncodeToString([]byte("kurma:s3cret"))
	if err := os.WriteFile(auth, []byte(`{"auths":{"`+reg.host+`":{"auth":"`+cred+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REGISTRY_AUTH_FILE", auth)
	img, err := newTestFetcher(t, opts).Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, img.Rootfs, testTree...)

	// Credentials for the repository come before the registry's (as
	// kurma-node writes two Secrets' for one registry): the registry's
	// are wrong here, the repository's right.
	wrong := base64.StdEncoding.EncodeToString([]byte("other:nope"))
	if err := os.WriteFile(auth, []byte(`{"auths":{"`+reg.host+`":{"auth":"`+wrong+`"},"`+reg.host+`/kurma/private":{"auth":"`+cred+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newTestFetcher(t, opts).Fetch(context.Background(), uri); err != nil {
		t.Errorf("the repository's credentials were not used: %v", err)
	}
}
