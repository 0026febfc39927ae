package agent

import (
	"debug/elf"
	"path/filepath"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// kurma-agent runs in images without a libc: built the way kurma builds it
// (CGO_ENABLED=0: the Makefile, networkpod's tests, e2e and bench) it must be
// a static executable. It links package net since it runs cni-wrapper's code
// in-process (libcni, netlink), so CGO_ENABLED=1 would make it dynamic.
func TestAgentIsStatic(t *testing.T) {
	dir := t.TempDir()
	if err := testutil.GoBuild(dir, testutil.BuildOptions{}, "./cmd/kurma-agent"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "kurma-agent")
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("kurma-agent has an ELF interpreter: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("kurma-agent needs shared libraries %v", libs)
	}
}
