// Package testutil holds helpers shared by kurma's tests (and the bench)
// that touch real kernel objects: root checks, network namespaces, built
// binaries and images (Build, BuiltImage), one harness for a real kurmad
// process (Kurmad), leak probes, and the two ways a test waits: for a line
// a process writes (Lines, StartUntil) or, where nothing announces the
// event, for a polled condition with a deadline (Poll, WaitFor).
package testutil

import (
	"os"
	"testing"
)

// RequireRoot skips t when not running as root, unless KURMA_REQUIRE_ROOT=1,
// in which case it fails: `make test` and CI set it so that a green run means
// every real-kernel test ran.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("KURMA_REQUIRE_ROOT") == "1" {
		t.Fatal("this test needs root (KURMA_REQUIRE_ROOT=1 is set, so it may not skip)")
	}
	t.Skip("needs root; set KURMA_REQUIRE_ROOT=1 to make this a failure")
}
