package testutil

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// RepoRoot returns the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BuiltImage returns the path of a file written by `make images` under
// images/out (for example "cni-netplugin.aci"), failing t with the command
// to run when it is missing.
func BuiltImage(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "images", "out", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make images` first (make test does): %v", p, err)
	}
	return p
}

// Flanneld is the flanneld binary `make flanneld` builds (make images and
// make test run it).
func Flanneld(t testing.TB) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "plugins", "flannel", "out", "flanneld")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make flanneld` first (make test does): %v", p, err)
	}
	return p
}
