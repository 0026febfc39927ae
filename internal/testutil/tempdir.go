package testutil

import (
	"os"
	"testing"
)

// ShortDir is a fresh temp dir with a short path (prefix and a few random
// characters under $TMPDIR), removed at the end of the test: unix socket
// paths are limited to 108 bytes, and t.TempDir() embeds the test's name.
func ShortDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
