package daemon

import (
	"os"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/networkpod"
)

// The test binary is also libcontainer's "init": the boot tests start real
// plugin containers (see networkpod.Init).
func init() { networkpod.Init() }

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}
