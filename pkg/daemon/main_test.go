package daemon

import (
	"os"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}
