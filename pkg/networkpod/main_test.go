package networkpod

import (
	"os"
	"runtime"
	"testing"

	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/kurma-project/kurma/internal/testutil"
)

// The test binary is also libcontainer's "init": libcontainer re-executes
// it (as /proc/self/exe init) to set up every container process.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
	// Keep the main thread for the main goroutine: libcontainer's
	// mount-source goroutine joins the container's mount namespace on a
	// locked thread and exits without unlocking; on the main thread that
	// thread cannot die and would pin the namespace (and its mounts).
	runtime.LockOSThread()
}

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}
