package networkpod

import (
	"os"
	"runtime"
	"testing"

	"github.com/opencontainers/runc/libcontainer"
	// The libcontainer exec benchmark starts a process in a container
	// from the test binary itself, which libcontainer re-executes as its
	// init: nsenter's C constructor must be in it.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/kurma-project/kurma/internal/testutil"
)

// The test binary is libcontainer's "init" for BenchmarkLibcontainerExec
// (kurmad's containers are started by kurma-init).
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init() // does not return
	}
	runtime.LockOSThread()
}

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}
