package pluginhost

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
)

// A main executable that writes 5000 lines to stderr at once reaches
// kurmad's log rate-limited: about logBurst of its lines, then a warning
// counting the ones left out, logged with the next line the rate lets
// through.
func TestMainOutputRateLimited(t *testing.T) {
	var (
		mu      sync.Mutex
		floods  int
		dropped int
	)
	p := newTestHost(t, func(o *Options) {
		onLog(o, logrus.InfoLevel, func(e *logrus.Entry) {
			if e.Data["network"] != "ktnflood" || e.Data["stream"] != "stderr" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.HasPrefix(e.Message, "flood line "):
				floods++
			case e.Data["dropped"] != nil:
				dropped += e.Data["dropped"].(int)
			}
		})
	})
	startGenerations(t, p, Spec{Network: "ktnflood", Image: toolImage(t, "floodmain")})
	testutil.WaitFor(t, 20*time.Second, "the warning counting the lines left out", func() error {
		mu.Lock()
		defer mu.Unlock()
		if dropped == 0 {
			return errors.New("no such warning yet")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	// The flood takes well under a second: the rate adds at most logRate
	// lines a second to the burst.
	if floods > logBurst+2*logRate {
		t.Errorf("%d of the 5000 flood lines were logged; want at most about %d", floods, logBurst)
	}
	// The count includes any tick the rate left out before the warning.
	if floods+dropped < 5000 {
		t.Errorf("%d flood lines logged and %d lines counted as left out; want all 5000 accounted for", floods, dropped)
	}
}
