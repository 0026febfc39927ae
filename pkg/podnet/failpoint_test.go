package podnet

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// failpointMark is a string only failpointDie holds: in a binary, it says
// the failpoints were compiled in.
const failpointMark = " reached: killing myself"

// requireFailpoints fails t (skips it, outside make test) when this test
// binary was built without the kurma_failpoints tag: its failpoints would
// never fire.
func requireFailpoints(t *testing.T) {
	t.Helper()
	if failpointsBuilt {
		return
	}
	msg := "built without the " + FailpointsTag + " tag (make test builds with it): failpoints do not fire"
	if os.Getenv("KURMA_REQUIRE_ROOT") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestReleaseBuildHasNoFailpoints: kurmad built as `make build` builds it
// holds nothing of the failpoints (no failpoint code, not the variable's
// name), while a build with the tag (this test binary) does.
func TestReleaseBuildHasNoFailpoints(t *testing.T) {
	requireFailpoints(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// go test strips its binaries' symbol tables: the data tells.
	if marks := failpointTraces(t, self, false); !slices.Contains(marks, failpointMark) {
		t.Fatalf("the test binary, built with %s, shows %v: the check cannot see failpoints", FailpointsTag, marks)
	}
	dir := t.TempDir()
	if err := testutil.GoBuild(dir, testutil.BuildOptions{Cgo: true}, "./cmd/kurmad"); err != nil {
		t.Fatal(err)
	}
	if marks := failpointTraces(t, filepath.Join(dir, "kurmad"), true); len(marks) > 0 {
		t.Errorf("the release kurmad holds failpoints: %v", marks)
	}
}

// failpointTraces lists what of the failpoints the ELF binary at path
// holds: podnet symbols named failpoint* (when it has a symbol table, which
// withSymbols requires), FailpointEnv and failpointMark in its data.
func failpointTraces(t *testing.T, path string, withSymbols bool) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	syms, err := f.Symbols()
	if err != nil && (withSymbols || !errors.Is(err, elf.ErrNoSymbols)) {
		t.Fatalf("%s: %v", path, err)
	}
	for _, s := range syms {
		if strings.Contains(s.Name, "/pkg/podnet.failpoint") {
			out = append(out, "symbol "+s.Name)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{FailpointEnv, failpointMark} {
		if bytes.Contains(data, []byte(s)) {
			out = append(out, s)
		}
	}
	return out
}
