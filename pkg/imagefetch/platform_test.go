package imagefetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	linuxAMD64   = v1.Platform{OS: "linux", Architecture: "amd64"}
	linuxARM64   = v1.Platform{OS: "linux", Architecture: "arm64"}
	linuxARM64v8 = v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
	linuxARMv7   = v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}
	linuxS390x   = v1.Platform{OS: "linux", Architecture: "s390x"}
)

// otherPlatform is a platform this host does not run: linux/arm64 on an
// amd64 host, linux/amd64 on any other.
func otherPlatform() v1.Platform {
	if hostPlatform().Architecture == "amd64" {
		return linuxARM64
	}
	return linuxAMD64
}

func TestPlatformFor(t *testing.T) {
	for _, c := range []struct {
		goarch string
		want   v1.Platform
	}{
		{"amd64", linuxAMD64},
		{"arm64", linuxARM64v8},
		{"s390x", linuxS390x},
	} {
		if got := platformFor("linux", c.goarch); got.String() != c.want.String() {
			t.Errorf("platformFor(linux, %s) = %s, want %s", c.goarch, got, c.want)
		}
	}
}

// TestChooseManifest is the selection logic alone: which entry of an index
// a host of each platform runs, and the error naming what an index offers
// when it has nothing for the host.
func TestChooseManifest(t *testing.T) {
	arm64 := platformFor("linux", "arm64")
	for _, c := range []struct {
		name      string
		host      v1.Platform
		mediaType types.MediaType
		offered   []*v1.Platform // nil: an entry without a platform
		want      string         // the platform chosen; "" for a refusal
		wantErr   []string       // the platforms the refusal names
	}{
		{"amd64 host", linuxAMD64, types.OCIImageIndex, []*v1.Platform{&linuxARM64, &linuxAMD64}, "linux/amd64", nil},
		{"arm64 host", arm64, types.OCIImageIndex, []*v1.Platform{&linuxAMD64, &linuxARM64}, "linux/arm64", nil},
		{"arm64 host, Docker list", arm64, types.DockerManifestList, []*v1.Platform{&linuxAMD64, &linuxARM64}, "linux/arm64", nil},
		{"arm64 host takes v8", arm64, types.OCIImageIndex, []*v1.Platform{&linuxAMD64, &linuxARM64v8}, "linux/arm64/v8", nil},
		{"arm64 host prefers v8 over no variant", arm64, types.OCIImageIndex, []*v1.Platform{&linuxARM64, &linuxARM64v8}, "linux/arm64/v8", nil},
		{"entry without a platform skipped", linuxAMD64, types.OCIImageIndex, []*v1.Platform{nil, &linuxAMD64}, "linux/amd64", nil},
		{"arm64 host does not run 32-bit arm", arm64, types.OCIImageIndex, []*v1.Platform{&linuxARMv7, &linuxAMD64}, "", []string{"linux/amd64", "linux/arm/v7"}},
		{"amd64 host does not run arm64", linuxAMD64, types.DockerManifestList, []*v1.Platform{&linuxARM64v8, &linuxS390x}, "", []string{"linux/arm64/v8", "linux/s390x"}},
		{"other OS", linuxAMD64, types.OCIImageIndex, []*v1.Platform{{OS: "windows", Architecture: "amd64"}}, "", []string{"windows/amd64"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			idx := v1.IndexManifest{SchemaVersion: 2, MediaType: c.mediaType}
			byDigest := map[string]string{}
			manifestType := types.OCIManifestSchema1
			if c.mediaType == types.DockerManifestList {
				manifestType = types.DockerManifestSchema2
			}
			for i, p := range c.offered {
				sum := sha256.Sum256([]byte{byte(i)})
				d := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
				idx.Manifests = append(idx.Manifests, v1.Descriptor{MediaType: manifestType, Digest: d, Size: 100, Platform: p})
				if p != nil {
					byDigest[d.String()] = p.String()
				}
			}
			raw, err := json.Marshal(idx)
			if err != nil {
				t.Fatal(err)
			}
			d, err := chooseManifest(raw, string(c.mediaType), c.host, "example.com/img:v1")
			if c.want != "" {
				if err != nil {
					t.Fatal(err)
				}
				if byDigest[d] != c.want {
					t.Fatalf("chose %s, want %s", byDigest[d], c.want)
				}
				return
			}
			var pe *PlatformError
			if !errors.As(err, &pe) {
				t.Fatalf("chose %s (err %v), want a PlatformError", byDigest[d], err)
			}
			if !slices.Equal(pe.Offered, c.wantErr) || pe.Want != c.host.String() || pe.Image != "example.com/img:v1" {
				t.Fatalf("error %+v, want image example.com/img:v1, want %s, offered %v", pe, c.host, c.wantErr)
			}
			for _, s := range append([]string{"example.com/img:v1", c.host.String()}, c.wantErr...) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}
		})
	}
}

func TestCheckConfigAndACIPlatform(t *testing.T) {
	arm64 := platformFor("linux", "arm64")
	for _, c := range []struct {
		host     v1.Platform
		os, arch string
		ok       bool
	}{
		{linuxAMD64, "linux", "amd64", true},
		{linuxAMD64, "", "", true},
		{linuxAMD64, "linux", "arm64", false},
		{arm64, "linux", "arm64", true},
		{arm64, "linux", "amd64", false},
		{arm64, "windows", "arm64", false},
	} {
		err := checkConfigPlatform(&v1.ConfigFile{OS: c.os, Architecture: c.arch}, c.host, "img")
		if (err == nil) != c.ok {
			t.Errorf("host %s, config %s/%s: err %v, want ok=%v", c.host, c.os, c.arch, err, c.ok)
		}
	}
	// appc spells arm64 "aarch64".
	for _, c := range []struct {
		host   v1.Platform
		labels map[string]string
		ok     bool
	}{
		{linuxAMD64, map[string]string{"os": "linux", "arch": "amd64"}, true},
		{linuxAMD64, map[string]string{}, true},
		{linuxAMD64, map[string]string{"os": "linux", "arch": "aarch64"}, false},
		{arm64, map[string]string{"os": "linux", "arch": "aarch64"}, true},
		{arm64, map[string]string{"os": "linux", "arch": "amd64"}, false},
		{arm64, map[string]string{"os": "linux", "arch": "arm64"}, false},
	} {
		err := checkACIPlatform(c.labels, c.host, "img")
		if (err == nil) != c.ok {
			t.Errorf("host %s, labels %v: err %v, want ok=%v", c.host, c.labels, err, c.ok)
		}
	}
}

// platformImage is an image for p whose rootfs holds one file, "platform",
// saying p: a test reads it to see which image was unpacked.
func platformImage(t *testing.T, p v1.Platform) v1.Image {
	t.Helper()
	img := ociImageFromLayers(t, tarBytes(t, []entry{{Name: "platform", Body: p.String()}}))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// platformIndex is an OCI index of one platformImage for each of ps.
func platformIndex(t *testing.T, ps ...v1.Platform) v1.ImageIndex {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, p := range ps {
		p := p
		adds = append(adds, mutate.IndexAddendum{Add: platformImage(t, p), Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.AppendManifests(empty.Index, adds...)
}

func (r *testRegistry) pushIndex(t *testing.T, repoTag string, idx v1.ImageIndex) {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
}

func wantPlatformFile(t *testing.T, img *Image, want v1.Platform) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(img.Rootfs, "platform"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want.String() {
		t.Fatalf("unpacked the %s image, want %s", b, want)
	}
	if img.Labels["os"] != want.OS || img.Labels["arch"] != want.Architecture {
		t.Fatalf("labels %v, want os %s arch %s", img.Labels, want.OS, want.Architecture)
	}
}

// TestRegistryIndexPicksHostPlatform: from a registry's multi-platform
// index kurma pulls the image of this host's platform, whichever comes
// first in the index.
func TestRegistryIndexPicksHostPlatform(t *testing.T) {
	host := hostPlatform()
	reg := newTestRegistry(t)
	reg.pushIndex(t, "kurma/multi:v1", platformIndex(t, otherPlatform(), host))
	reg.pushIndex(t, "kurma/multi:v2", platformIndex(t, host, otherPlatform()))
	f := newTestFetcher(t, Options{InsecureRegistries: []string{reg.host}})
	for _, tag := range []string{"v1", "v2"} {
		img, err := f.Fetch(context.Background(), "docker://"+reg.host+"/kurma/multi:"+tag)
		if err != nil {
			t.Fatal(err)
		}
		wantPlatformFile(t, img, host)
	}
}

// TestRegistryIndexWithoutHostPlatformRefused: an index with only other
// platforms is refused before any blob is downloaded, with an error naming
// the image and the platforms it offers.
func TestRegistryIndexWithoutHostPlatformRefused(t *testing.T) {
	other := otherPlatform()
	reg := newTestRegistry(t)
	reg.pushIndex(t, "kurma/foreign:v1", platformIndex(t, other, linuxS390x))
	f := newTestFetcher(t, Options{InsecureRegistries: []string{reg.host}})
	uri := "docker://" + reg.host + "/kurma/foreign:v1"
	blobs := reg.blobGets.Load()
	img, err := f.Fetch(context.Background(), uri)
	var pe *PlatformError
	if !errors.As(err, &pe) {
		t.Fatalf("fetched %+v (err %v), want a PlatformError", img, err)
	}
	want := []string{other.String(), linuxS390x.String()}
	slices.Sort(want)
	if !slices.Equal(pe.Offered, want) || pe.Want != hostPlatform().String() {
		t.Fatalf("error %+v, want offered %v", pe, want)
	}
	for _, s := range append([]string{uri, hostPlatform().String()}, want...) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if n := reg.blobGets.Load() - blobs; n != 0 {
		t.Errorf("%d blobs downloaded for an image this host cannot run", n)
	}
	if imgs, err := f.List(); err != nil || len(imgs) != 0 {
		t.Errorf("store holds %d images (%v) after the refusal", len(imgs), err)
	}
}

// TestRegistrySingleImageOfOtherPlatformRefused: an image (no index) built
// for another architecture is refused, naming the one it is for.
func TestRegistrySingleImageOfOtherPlatformRefused(t *testing.T) {
	other := otherPlatform()
	reg := newTestRegistry(t)
	reg.push(t, "kurma/foreign:v1", platformImage(t, other))
	f := newTestFetcher(t, Options{InsecureRegistries: []string{reg.host}})
	uri := "docker://" + reg.host + "/kurma/foreign:v1"
	_, err := f.Fetch(context.Background(), uri)
	var pe *PlatformError
	if !errors.As(err, &pe) || !slices.Equal(pe.Offered, []string{other.String()}) {
		t.Fatalf("err %v, want a PlatformError offering %s", err, other)
	}
	if !strings.Contains(err.Error(), uri) {
		t.Errorf("error %q does not name the image", err)
	}
}

// TestOCILayoutIndexPicksHostPlatform: the same choice for a local OCI
// layout whose image is an index.
func TestOCILayoutIndexPicksHostPlatform(t *testing.T) {
	host := hostPlatform()
	write := func(ps ...v1.Platform) string {
		dir := t.TempDir()
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendIndex(platformIndex(t, ps...)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	f := newTestFetcher(t, Options{})
	img, err := f.Fetch(context.Background(), "file://"+write(otherPlatform(), host))
	if err != nil {
		t.Fatal(err)
	}
	wantPlatformFile(t, img, host)

	dir := write(otherPlatform())
	_, err = f.Fetch(context.Background(), "file://"+dir)
	var pe *PlatformError
	if !errors.As(err, &pe) || !slices.Equal(pe.Offered, []string{otherPlatform().String()}) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err %v, want a PlatformError naming %s and offering %s", err, dir, otherPlatform())
	}
}

// TestACIOfOtherPlatformRefused: an ACI labelled for another architecture
// is refused, naming it.
func TestACIOfOtherPlatformRefused(t *testing.T) {
	_, hostArch := appcPlatform(hostPlatform())
	other := "aarch64"
	if hostArch == "aarch64" {
		other = "amd64"
	}
	m := strings.Replace(testManifest, `"value":"amd64"`, `"value":"`+other+`"`, 1)
	p := writeFile(t, t.TempDir(), "foreign.aci", compress(t, tarBytes(t, aciEntries(m, testRootfs)), "gzip"))
	_, err := newTestFetcher(t, Options{}).Fetch(context.Background(), "file://"+p)
	var pe *PlatformError
	if !errors.As(err, &pe) || !slices.Equal(pe.Offered, []string{"linux/" + other}) || !strings.Contains(err.Error(), p) {
		t.Fatalf("err %v, want a PlatformError naming %s and offering linux/%s", err, p, other)
	}
}
