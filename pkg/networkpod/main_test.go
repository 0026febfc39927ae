package networkpod

import (
	"os"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// The test binary is also libcontainer's "init" (see Init).
func init() { Init() }

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}
