package builder

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// kurmaStubs is a bin dir holding every kurmaBinaries name: static Go
// binaries (the compiled cni-wrapper) standing in for kurma's, and for
// kurmad, when dynamic is set, a dynamically linked host program (ip).
func kurmaStubs(t *testing.T, dynamic bool) string {
	t.Helper()
	dir := t.TempDir()
	for n := range kurmaBinaries {
		src := filepath.Join(compiled(t), WrapperBinary)
		if n == "kurmad" && dynamic {
			p, err := exec.LookPath("ip")
			if err != nil {
				t.Fatalf("ip (iproute2) is needed: %v", err)
			}
			src = p
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestKurmaImage: kurma's image holds the binaries in /opt/kurma/bin and
// cni-netplugin's, flannel's and netpol's ACIs (byte for byte, each with an mtime of its own), and
// /var/run as a link to /run; its entrypoint is kurma-node run; the OCI
// layout names it <version> and latest, one image; the docker-archive
// loads into podman under both names; two builds are identical.
func TestKurmaImage(t *testing.T) {
	aci := shared(t).ACIPath
	bin := kurmaStubs(t, false)
	build := func() *KurmaResult {
		res, err := BuildKurma(context.Background(), KurmaOptions{OutDir: t.TempDir(), Version: "v9.1-2-gabc", BinDir: bin, SkipCompile: true, PluginACI: aci,
			FlannelACI: shared(t).Flannel.ACIPath, NetpolACI: shared(t).Netpol.ACIPath})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := build()
	if want := []string{"kurma.dev/kurma:v9.1-2-gabc", "kurma.dev/kurma:" + KurmaReleaseTag, "kurma.dev/kurma:latest"}; !slices.Equal(res.Names, want) || len(res.Libs) != 0 {
		t.Errorf("names %v libs %v, want %v and no libraries (static binaries)", res.Names, res.Libs, want)
	}
	if again := build(); again.Digest != res.Digest {
		t.Errorf("two builds: %s and %s", res.Digest, again.Digest)
	}

	im, img, cf := readLayout(t, res.OCIDir)
	var refs []string
	for _, m := range im.Manifests {
		refs = append(refs, m.Annotations[annotationRefName])
		if m.Digest.String() != res.Digest {
			t.Errorf("index entry %s has digest %s, want %s", m.Annotations[annotationRefName], m.Digest, res.Digest)
		}
	}
	if !slices.Equal(refs, []string{"v9.1-2-gabc", KurmaReleaseTag, "latest"}) {
		t.Errorf("ref names %v", refs)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/opt/kurma/bin/kurma-node"}) || !slices.Equal(cf.Config.Cmd, []string{"run"}) ||
		cf.Config.Labels[labelVersion] != "v9.1-2-gabc" || cf.Config.Labels["dev.kurma.netpol"] != "/opt/kurma/images/netpol.aci" {
		t.Errorf("config: entrypoint %v cmd %v labels %v", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Labels)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	files := tarFiles(t, raw)
	for n := range kurmaBinaries {
		if f, ok := files["opt/kurma/bin/"+n]; !ok || f.hdr.Mode&0o111 == 0 {
			t.Errorf("/opt/kurma/bin/%s missing or not executable", n)
		}
	}
	for name, src := range map[string]string{"cni-netplugin.aci": aci, "flannel.aci": shared(t).Flannel.ACIPath,
		"netpol.aci": shared(t).Netpol.ACIPath} {
		f, ok := files["opt/kurma/images/"+name]
		if !ok || !bytes.Equal(f.data, readFile(t, src)) {
			t.Errorf("/opt/kurma/images/%s is not the plugin image %s", name, src)
		} else if f.hdr.ModTime.Equal(epoch) {
			t.Errorf("%s has the fixed mtime of every file: kurmad would take a new one of the same size as unchanged", name)
		}
	}
	if l, ok := files["var/run"]; !ok || l.hdr.Linkname != "../run" {
		t.Errorf("/var/run: %+v, want a link to ../run", l.hdr)
	}

	testutil.RequireRoot(t)
	pm, err := testutil.NewPodman(t.TempDir(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pm.Cleanup(context.Background()) })
	if _, err := pm.Run(context.Background(), "load", "-i", res.Archive); err != nil {
		t.Fatal(err)
	}
	out, err := pm.Run(context.Background(), "images", "--format", "{{.Repository}}:{{.Tag}} {{.Digest}}")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Names {
		if !strings.Contains(out, n+" ") {
			t.Errorf("podman load gave %q, want %s among them", out, n)
		}
	}
}

// TestKurmaImageCarriesLibraries: a binary that is not static (here a
// dynamically linked kurmad) brings its ELF interpreter and libraries,
// from the build host, at their paths.
func TestKurmaImageCarriesLibraries(t *testing.T) {
	res, err := BuildKurma(context.Background(), KurmaOptions{OutDir: t.TempDir(), BinDir: kurmaStubs(t, true), SkipCompile: true,
		PluginACI: shared(t).ACIPath, FlannelACI: shared(t).Flannel.ACIPath, NetpolACI: shared(t).Netpol.ACIPath})
	if err != nil {
		t.Fatal(err)
	}
	var interp, libc bool
	for _, l := range res.Libs {
		interp = interp || strings.HasPrefix(filepath.Base(l), "ld-linux")
		libc = libc || strings.HasPrefix(filepath.Base(l), "libc.so")
	}
	if !interp || !libc {
		t.Errorf("carried libraries %v, want the ELF interpreter and libc", res.Libs)
	}
}

// TestManifestsNameTheRelease: deploy/kubernetes' manifests run kurma's
// image by its release tag, never :latest.
func TestManifestsNameTheRelease(t *testing.T) {
	want := "image: " + KurmaRepository + ":" + KurmaReleaseTag
	for _, p := range []string{"../../deploy/kubernetes/kurma.yaml", "../../deploy/kubernetes/flannel/kurma-flannel.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), want); n != 2 || strings.Contains(string(b), KurmaRepository+":latest") {
			t.Errorf("%s names %q %d times (want 2: prepare-host and kurmad) or names :latest", p, want, n)
		}
	}
}
