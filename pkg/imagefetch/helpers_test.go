package imagefetch

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dbzip2 "github.com/dsnet/compress/bzip2"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/sirupsen/logrus"
	"github.com/ulikunitz/xz"
)

// entry is one tar entry of a test archive.
type entry struct {
	Name string
	Type byte // tar.TypeReg when 0
	Body string
	Link string
	Mode int64
	Uid  int
	Gid  int
}

func tarBytes(t testing.TB, ents []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1700000000, 0)
	for _, e := range ents {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: e.Name, Typeflag: typ, Linkname: e.Link, Mode: mode, ModTime: mt, Format: tar.FormatPAX, Uid: e.Uid, Gid: e.Gid}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const testManifest = `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/kurma/test",
"labels":[{"name":"version","value":"1.0"},{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
"app":{"exec":["/bin/plugin","--serve"],"user":"0","group":"0","environment":[{"name":"PATH","value":"/bin"}]}}`

// testRootfs is the content of the synthetic test image.
var testRootfs = []entry{
	{Name: "bin", Type: tar.TypeDir},
	{Name: "bin/plugin", Body: "#!/bin/sh\necho plugin\n", Mode: 0o4755},
	{Name: "bin/sh", Type: tar.TypeSymlink, Link: "/bin/plugin"},
	{Name: "etc", Type: tar.TypeDir},
	{Name: "etc/hosts", Body: "127.0.0.1 localhost\n"},
	{Name: "etc/hosts2", Type: tar.TypeLink, Link: "etc/hosts"},
	{Name: "opt", Type: tar.TypeDir},
	{Name: "opt/network", Type: tar.TypeDir},
	{Name: "opt/network/add", Type: tar.TypeSymlink, Link: "../../bin/plugin"},
}

// aciEntries wraps rootfs entries into an ACI with the given manifest.
func aciEntries(manifest string, rootfs []entry) []entry {
	out := []entry{{Name: "manifest", Body: manifest}, {Name: "rootfs", Type: tar.TypeDir}}
	for _, e := range rootfs {
		e.Name = "rootfs/" + e.Name
		if e.Type == tar.TypeLink {
			e.Link = "rootfs/" + e.Link
		}
		out = append(out, e)
	}
	return out
}

func compress(t testing.TB, raw []byte, how string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	switch how {
	case "none":
		return raw
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "bzip2":
		w, err = dbzip2.NewWriter(&buf, nil)
	case "xz":
		w, err = xz.NewWriter(&buf)
	default:
		t.Fatalf("compression %q", how)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testACI returns the synthetic ACI, gzip-compressed.
func testACI(t testing.TB) []byte {
	return compress(t, tarBytes(t, aciEntries(testManifest, testRootfs)), "gzip")
}

// ociImageFromLayers builds an image for this host's architecture from
// uncompressed layer tars with the same app as testManifest.
func ociImageFromLayers(t testing.TB, layers ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, l := range layers {
		l := l
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(l)), nil })
		if err != nil {
			t.Fatal(err)
		}
		img, err = mutate.AppendLayers(img, layer)
		if err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", hostPlatform().Architecture
	cf.Config.Entrypoint = []string{"/bin/plugin"}
	cf.Config.Cmd = []string{"--serve"}
	cf.Config.Env = []string{"PATH=/bin"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func writeLayout(t testing.TB, dir string, img v1.Image) string {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newTestFetcher(t testing.TB, opts Options) *Fetcher {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		if testing.Verbose() {
			l.SetOutput(os.Stderr)
		}
		opts.Logger = l
	}
	f, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// listTree returns "path type" lines for everything under root, sorted.
func listTree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		kind := "f"
		switch {
		case fi.IsDir():
			kind = "d"
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			kind = "l->" + l
		}
		out = append(out, rel+" "+kind)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func wantTree(t testing.TB, root string, want ...string) {
	t.Helper()
	got := listTree(t, root)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rootfs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var testTree = []string{
	"bin d", "bin/plugin f", "bin/sh l->/bin/plugin", "etc d", "etc/hosts f", "etc/hosts2 f",
	"opt d", "opt/network d", "opt/network/add l->../../bin/plugin",
}
