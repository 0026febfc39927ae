package testutil

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// BuildStatic builds the Go command at pkg (relative to the repository root,
// e.g. "./cmd/kurma-agent") with CGO_ENABLED=0, once per test binary, and
// returns the binary's path. Call RemoveBuilds from TestMain to delete them.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "kurma-build-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// RemoveBuilds deletes what BuildStatic built.
func RemoveBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
		buildDir = ""
		built = map[string]string{}
	}
}

// ACIApp is the part of an ACI manifest's app a test needs.
type ACIApp struct {
	Exec []string
	Env  []string // "KEY=value"
}

// UnpackACI extracts an ACI's rootfs/ into dir/rootfs (plain or gzip tar)
// and returns that path and the manifest's app. It is for tests that need
// an image before, or without, the image store.
func UnpackACI(t testing.TB, aci, dir string) (string, ACIApp) {
	t.Helper()
	f, err := os.Open(aci)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	rootfs := filepath.Join(dir, "rootfs")
	var app ACIApp
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", aci, err)
		}
		name := filepath.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "manifest" {
			var m struct {
				App struct {
					Exec        []string `json:"exec"`
					Environment []struct {
						Name, Value string
					} `json:"environment"`
				} `json:"app"`
			}
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatalf("%s manifest: %v", aci, err)
			}
			app.Exec = m.App.Exec
			for _, e := range m.App.Environment {
				app.Env = append(app.Env, e.Name+"="+e.Value)
			}
			continue
		}
		rel, ok := strings.CutPrefix(name, "rootfs")
		if !ok || strings.Contains(rel, "..") {
			continue
		}
		target := filepath.Join(rootfs, rel)
		mode := os.FileMode(h.Mode) & os.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, mode|0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		case tar.TypeSymlink:
			_ = os.MkdirAll(filepath.Dir(target), 0o755)
			if err := os.Symlink(h.Linkname, target); err != nil {
				t.Fatal(err)
			}
		case tar.TypeLink:
			_ = os.MkdirAll(filepath.Dir(target), 0o755)
			old := filepath.Join(rootfs, strings.TrimPrefix(filepath.Clean(strings.TrimPrefix(h.Linkname, "./")), "rootfs"))
			if err := os.Link(old, target); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := os.Stat(rootfs); err != nil {
		t.Fatalf("%s has no rootfs/: %v", aci, err)
	}
	if len(app.Exec) == 0 {
		t.Fatalf("%s: manifest has no app.exec", aci)
	}
	return rootfs, app
}

// CopyExecutable copies the file src to dst (creating parents) as mode 0755.
func CopyExecutable(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(fmt.Errorf("copy %s: %w", src, err))
	}
}
