package agent

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// kurma-agent runs in images without a libc: it must never link cgo, even
// when built with CGO_ENABLED=1 (package net would pull it in).
func TestAgentLinksNoCgo(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/kurma-agent")
	cmd.Dir = testutil.RepoRoot()
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "runtime/cgo" || dep == "net" || dep == "os/user" {
			t.Errorf("kurma-agent depends on %s", dep)
		}
	}
}
