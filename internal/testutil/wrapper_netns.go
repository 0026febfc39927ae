package testutil

import (
	"testing"

	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// NewNetnsFile creates a network namespace bind-mounted at path (a file that
// must not exist yet, normally in t.TempDir()) and removes it when t ends,
// with the same code kurmad uses for pods (package netnsfile).
func NewNetnsFile(t testing.TB, path string) string {
	t.Helper()
	if err := netnsfile.Create(path); err != nil {
		t.Fatalf("creating netns %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := RemoveNetnsFile(path); err != nil {
			t.Errorf("removing netns %s: %v", path, err)
		}
	})
	return path
}

// RemoveNetnsFile unmounts and deletes a netns made by NewNetnsFile; a path
// already gone is not an error.
func RemoveNetnsFile(path string) error { return netnsfile.Remove(path) }
