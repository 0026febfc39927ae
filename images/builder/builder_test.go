package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/appc/spec/aci"
	"github.com/appc/spec/schema"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

var (
	compileOnce sync.Once
	compiledDir string
	compileErr  error

	buildOnce sync.Once
	builtDir  string
	built     *Result
	buildErr  error
)

// compiled builds the binaries once per test binary run into a directory
// removed by TestMain.
func compiled(t *testing.T) string {
	t.Helper()
	compileOnce.Do(func() {
		compiledDir, compileErr = os.MkdirTemp("", "ktw-builder-bin-")
		if compileErr == nil {
			compileErr = Compile(context.Background(), "", compiledDir, "")
		}
	})
	if compileErr != nil {
		t.Fatalf("compile: %v", compileErr)
	}
	return compiledDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{compiledDir, builtDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

func buildInto(t *testing.T, out string) *Result {
	t.Helper()
	res, err := Build(context.Background(), Options{OutDir: out, BinDir: compiled(t), SkipCompile: true,
		Flanneld: filepath.Join(compiled(t), WrapperBinary), Netpol: filepath.Join(compiled(t), WrapperBinary)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// shared returns one build reused by the tests that only read it.
func shared(t *testing.T) *Result {
	t.Helper()
	bin := compiled(t)
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "ktw-builder-out-")
		if buildErr == nil {
			// The builder only copies flanneld and kurma-netpol: any
			// executable stands in.
			built, buildErr = Build(context.Background(), Options{OutDir: builtDir, BinDir: bin, SkipCompile: true,
				Flanneld: filepath.Join(bin, WrapperBinary), Netpol: filepath.Join(bin, WrapperBinary)})
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// TestReproducible builds twice and expects byte-identical outputs.
func TestReproducible(t *testing.T) {
	a := shared(t)
	b := buildInto(t, t.TempDir())
	if a.ACIImageID != b.ACIImageID {
		t.Errorf("ACI image IDs differ: %s vs %s", a.ACIImageID, b.ACIImageID)
	}
	if a.OCIDigest != b.OCIDigest {
		t.Errorf("OCI digests differ: %s vs %s", a.OCIDigest, b.OCIDigest)
	}
	if a.Flannel.ACIImageID != b.Flannel.ACIImageID || a.Flannel.OCIDigest != b.Flannel.OCIDigest {
		t.Errorf("flannel images differ: %+v vs %+v", a.Flannel, b.Flannel)
	}
	if a.Netpol.ACIImageID != b.Netpol.ACIImageID || a.Netpol.OCIDigest != b.Netpol.OCIDigest {
		t.Errorf("netpol images differ: %+v vs %+v", a.Netpol, b.Netpol)
	}
	fa, fb := readTree(t, filepath.Dir(a.ACIPath)), readTree(t, filepath.Dir(b.ACIPath))
	if len(fa) != len(fb) {
		t.Fatalf("different file sets: %d vs %d", len(fa), len(fb))
	}
	for name, da := range fa {
		if db, ok := fb[name]; !ok || !bytes.Equal(da, db) {
			t.Errorf("%s differs between two builds", name)
		}
	}
	// The reported image ID is the sha512 of the tar, which the ACI is.
	if got := "sha512-" + hex.EncodeToString(sha512Of(t, fa[ACIFile])); got != a.ACIImageID {
		t.Errorf("image ID %s, sha512 of the tar is %s", a.ACIImageID, got)
	}
}

func TestACI(t *testing.T) {
	res := shared(t)
	files, m := readACI(t, res.ACIPath)
	if m.Name.String() != Name {
		t.Errorf("name %q, want %q", m.Name, Name)
	}
	for k, want := range map[string]string{"version": Version, "os": "linux", "arch": appcArch(runtime.GOARCH)} {
		if got, _ := m.Labels.Get(k); got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if m.App == nil || !slices.Equal([]string(m.App.Exec), []string{"/opt/network/setup"}) || m.App.User != "0" || m.App.Group != "0" {
		t.Errorf("app = %+v, want exec [/opt/network/setup], user 0, group 0", m.App)
	}
	checkRootfs(t, files, "rootfs/")
}

// readACI validates the ACI at path and returns its files and manifest.
func readACI(t *testing.T, path string) (map[string]tarFile, *schema.ImageManifest) {
	t.Helper()
	raw := readFile(t, path)
	// A plain tar: kurmad's first fetch reads it twice (check, unpack),
	// and kurma's image compresses it already.
	if len(raw) < 512 || string(raw[257:262]) != "ustar" {
		t.Fatalf("%s is not a plain tar (its first header has no ustar magic)", path)
	}
	if err := aci.ValidateArchive(tar.NewReader(bytes.NewReader(raw))); err != nil {
		t.Fatalf("ValidateArchive: %v", err)
	}
	files := tarFiles(t, raw)
	var m schema.ImageManifest
	if err := m.UnmarshalJSON(files["manifest"].data); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	return files, &m
}

func TestOCILayout(t *testing.T) {
	res := shared(t)
	im, img, cf := readLayout(t, res.OCIDir)
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != Version {
		t.Fatalf("index manifests = %+v, want one with ref name %s", im.Manifests, Version)
	}
	if got := im.Manifests[0].Digest.String(); got != res.OCIDigest {
		t.Errorf("index digest %s, Build reported %s", got, res.OCIDigest)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/opt/network/setup"}) || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config: entrypoint %v os %s arch %s", cf.Config.Entrypoint, cf.OS, cf.Architecture)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	checkRootfs(t, tarFiles(t, raw), "")
}

// TestPluginsVersionPinned keeps PluginsVersion (recorded in the images) in
// step with go.mod.
func TestPluginsVersionPinned(t *testing.T) {
	out, err := exec.Command(goCommand(), "list", "-m", "-f", "{{.Version}}", pluginsModule).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", pluginsModule, err)
	}
	if got := strings.TrimSpace(string(out)); got != PluginsVersion {
		t.Errorf("go.mod pins %s %s but builder.PluginsVersion is %s: update the constant", pluginsModule, got, PluginsVersion)
	}
}

type tarFile struct {
	hdr  *tar.Header
	data []byte
}

func checkRootfs(t *testing.T, files map[string]tarFile, prefix string) {
	t.Helper()
	want := map[string]byte{}
	for _, n := range WrapperNames() {
		want["opt/network/"+n] = 0
	}
	for _, n := range PluginNames() {
		want["opt/cni/bin/"+n] = tar.TypeReg
	}
	for _, d := range []string{"tmp", "var/lib/cni", "etc"} {
		want[d] = tar.TypeDir
	}
	for name, typ := range want {
		f, ok := files[prefix+name]
		if !ok {
			t.Errorf("%s missing", prefix+name)
			continue
		}
		h := f.hdr
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: uid %d gid %d mtime %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		switch {
		case typ == 0 && h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeLink:
			t.Errorf("%s: type %c, want a file or hard link", h.Name, h.Typeflag)
		case typ != 0 && h.Typeflag != typ:
			t.Errorf("%s: type %c, want %c", h.Name, h.Typeflag, typ)
		}
		if h.Typeflag == tar.TypeLink {
			target, ok := files[strings.TrimSuffix(h.Linkname, "/")]
			if !ok || target.hdr.Typeflag != tar.TypeReg {
				t.Errorf("%s: hard link to %q, which is not an earlier regular file", h.Name, h.Linkname)
			}
		}
		if typ != tar.TypeDir && h.Mode&0o111 == 0 {
			t.Errorf("%s: mode %o is not executable", h.Name, h.Mode)
		}
	}
	if h := files[prefix+"tmp"].hdr; h != nil && h.Mode&0o7777 != 0o1777 {
		t.Errorf("tmp mode %o, want 1777", h.Mode&0o7777)
	}
	if f, ok := files[prefix+"etc/passwd"]; !ok || !bytes.HasPrefix(f.data, []byte("root:x:0:0:")) {
		t.Errorf("etc/passwd has no root entry")
	}
}

// tarFiles indexes a tar stream by cleaned name (no trailing slash).
func tarFiles(t *testing.T, raw []byte) map[string]tarFile {
	t.Helper()
	out := map[string]tarFile{}
	tr := tar.NewReader(bytes.NewReader(raw))
	var prev string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name < prev {
			t.Errorf("tar entries not sorted: %q after %q", name, prev)
		}
		prev = name
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = tarFile{hdr: h, data: data}
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = readFile(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha512Of(t *testing.T, b []byte) []byte {
	t.Helper()
	s := sha512.Sum512(b)
	return s[:]
}

// readLayout reads the OCI layout at dir: its index manifest, and the
// image of its first entry with that image's config.
func readLayout(t *testing.T, dir string) (*v1.IndexManifest, v1.Image, *v1.ConfigFile) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) == 0 {
		t.Fatalf("%s: the index lists no image", dir)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return im, img, cf
}

// TestFlannelImage: the flannel image is cni-netplugin's rootfs plus
// flanneld, as an ACI and an OCI layout, named kurma.dev/flannel at
// flanneld's version, with the same main executable (the wrapper's setup,
// which runs flanneld) and the in-process wrapper annotation.
func TestFlannelImage(t *testing.T) {
	res := shared(t)
	if res.Flannel == nil {
		t.Fatal("Build with Flanneld wrote no flannel image")
	}
	files, m := readACI(t, res.Flannel.ACIPath)
	if v, _ := m.Labels.Get("version"); m.Name.String() != FlannelName || v != FlannelVersion {
		t.Errorf("name %s version %s, want %s %s", m.Name, v, FlannelName, FlannelVersion)
	}
	if v, _ := m.Annotations.Get("kurma.dev/flannel"); v != FlannelVersion {
		t.Errorf("annotation kurma.dev/flannel = %q", v)
	}
	if m.App == nil || !slices.Equal([]string(m.App.Exec), []string{"/opt/network/setup"}) {
		t.Errorf("app = %+v, want exec [/opt/network/setup]", m.App)
	}
	checkRootfs(t, files, "rootfs/")
	if f, ok := files["rootfs/opt/flannel/flanneld"]; !ok || f.hdr.Mode&0o111 == 0 || !bytes.Equal(f.data, readFile(t, filepath.Join(res.BinDir, WrapperBinary))) {
		t.Error("rootfs/opt/flannel/flanneld missing, not executable or not the flanneld given")
	}

	im, _, cf := readLayout(t, res.Flannel.OCIDir)
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[annotationRefName] != FlannelVersion || im.Manifests[0].Digest.String() != res.Flannel.OCIDigest {
		t.Errorf("OCI index %+v, want one image %s tagged %s", im.Manifests, res.Flannel.OCIDigest, FlannelVersion)
	}
	if cf.Config.Labels["dev.kurma.flannel"] != FlannelVersion || cf.Config.Labels[labelTitle] != "flannel" {
		t.Errorf("OCI labels %v", cf.Config.Labels)
	}
}

// TestFlannelVersionPinned keeps FlannelVersion in step with the flannel
// release plugins/flannel builds.
func TestFlannelVersionPinned(t *testing.T) {
	cmd := exec.Command(goCommand(), "list", "-m", "-f", "{{.Version}}", "github.com/flannel-io/flannel")
	cmd.Dir = "../../plugins/flannel"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m github.com/flannel-io/flannel in plugins/flannel: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != FlannelVersion {
		t.Errorf("plugins/flannel pins flannel %s but builder.FlannelVersion is %s", got, FlannelVersion)
	}
}

// TestNetpolImage: the netpol image holds kurma-netpol and nothing of
// cni-netplugin's: named kurma.dev/netpol, its main executable
// kurma-netpol, its /opt/network verbs hard links to it (it dispatches on
// its name), without the wrapper's annotation (kurma-agent must run
// these executables, not its in-process wrapper) or CNI plugins.
func TestNetpolImage(t *testing.T) {
	res := shared(t)
	if res.Netpol == nil {
		t.Fatal("Build with Netpol wrote no netpol image")
	}
	files, m := readACI(t, res.Netpol.ACIPath)
	if v, _ := m.Labels.Get("version"); m.Name.String() != NetpolName || v != NetpolVersion {
		t.Errorf("name %s version %s, want %s %s", m.Name, v, NetpolName, NetpolVersion)
	}
	if v, _ := m.Annotations.Get("kurma.dev/kube-network-policies"); v != NetpolEngine {
		t.Errorf("annotation kurma.dev/kube-network-policies = %q, want %s", v, NetpolEngine)
	}
	for _, a := range []string{"kurma.dev/cni-wrapper", "kurma.dev/cni-plugins"} {
		if v, ok := m.Annotations.Get(a); ok {
			t.Errorf("annotation %s = %q: the netpol image has neither", a, v)
		}
	}
	if m.App == nil || !slices.Equal([]string(m.App.Exec), []string{"/bin/kurma-netpol"}) || m.App.User != "0" {
		t.Errorf("app = %+v, want exec [/bin/kurma-netpol] as root", m.App)
	}
	main, ok := files["rootfs/bin/kurma-netpol"]
	if !ok || main.hdr.Mode&0o111 == 0 || !bytes.Equal(main.data, readFile(t, filepath.Join(res.BinDir, WrapperBinary))) {
		t.Fatal("rootfs/bin/kurma-netpol missing, not executable or not the binary given")
	}
	for _, v := range []string{"add", "check", "del", "gc", "status"} {
		f, ok := files["rootfs/opt/network/"+v]
		if !ok || f.hdr.Typeflag != tar.TypeLink || f.hdr.Linkname != "rootfs/bin/kurma-netpol" {
			t.Errorf("rootfs/opt/network/%s: %+v, want a hard link to rootfs/bin/kurma-netpol", v, f.hdr)
		}
	}
	for name := range files {
		if strings.HasPrefix(name, "rootfs/opt/cni/") {
			t.Errorf("%s: the netpol image carries no CNI plugins", name)
		}
	}

	im, _, cf := readLayout(t, res.Netpol.OCIDir)
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[annotationRefName] != NetpolVersion || im.Manifests[0].Digest.String() != res.Netpol.OCIDigest {
		t.Errorf("OCI index %+v, want one image %s tagged %s", im.Manifests, res.Netpol.OCIDigest, NetpolVersion)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/bin/kurma-netpol"}) || cf.Config.Labels[labelTitle] != "netpol" ||
		cf.Config.Labels["dev.kurma.appc-name"] != NetpolName || cf.Config.Labels["dev.kurma.kube-network-policies"] != NetpolEngine {
		t.Errorf("OCI config: entrypoint %v labels %v", cf.Config.Entrypoint, cf.Config.Labels)
	}
	if _, ok := cf.Config.Labels["dev.kurma.cni-wrapper"]; ok {
		t.Error("OCI label dev.kurma.cni-wrapper: the netpol image's executables are not the wrapper")
	}
}

// TestNetpolEnginePinned keeps NetpolEngine in step with the
// kube-network-policies release plugins/netpol builds on.
func TestNetpolEnginePinned(t *testing.T) {
	cmd := exec.Command(goCommand(), "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/kube-network-policies")
	cmd.Dir = "../../plugins/netpol"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/kube-network-policies in plugins/netpol: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != NetpolEngine {
		t.Errorf("plugins/netpol pins kube-network-policies %s but builder.NetpolEngine is %s", got, NetpolEngine)
	}
}
