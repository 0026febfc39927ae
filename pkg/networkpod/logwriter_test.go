package networkpod

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/gendef"
)

// A main executable that writes 5000 lines to stderr and 5000 to stdout at
// once reaches kurmad's log rate-limited, both streams together: about
// logBurst of its lines, then a warning counting the ones left out, logged
// with the next line the rate lets through.
func TestMainOutputRateLimited(t *testing.T) {
	var (
		mu      sync.Mutex
		floods  int
		dropped int
	)
	p := newTestHost(t, func(o *Options) {
		onLog(o, logrus.InfoLevel, func(e *logrus.Entry) {
			// The main's own lines, and what the agent says it left out:
			// the rate's warnings (the main's streams) and the lines it
			// dropped while no kurmad watched yet (its own stream), which
			// a main that floods from its first instruction can overflow.
			if e.Data["network"] != "ktnflood" || (e.Data["stream"] != "stderr" && e.Data["stream"] != "stdout" && e.Data["dropped"] == nil) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.HasPrefix(e.Message, "flood line "):
				floods++
			case e.Data["dropped"] != nil:
				switch n := e.Data["dropped"].(type) {
				case int: // the rate's count
					dropped += n
				case uint64: // the agent's, from before the watch
					dropped += int(n)
				default:
					t.Errorf("dropped=%v (%T)", n, n)
				}
			}
		})
	})
	startGenerations(t, p, Spec{Network: "ktnflood", Definition: gendef.Definition{Image: toolImage(t, "floodmain")}})
	// The count includes any tick the rate left out before a warning.
	testutil.WaitFor(t, 20*time.Second, "the warnings counting the lines left out", func() error {
		mu.Lock()
		defer mu.Unlock()
		if floods+dropped < 10000 {
			return fmt.Errorf("%d flood lines logged and %d lines counted as left out; want all 10000 accounted for", floods, dropped)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	// The flood takes well under a second: the rate adds at most logRate
	// lines a second to the burst.
	if floods > logBurst+2*logRate {
		t.Errorf("%d of the 10000 flood lines were logged; want at most about %d", floods, logBurst)
	}
}
