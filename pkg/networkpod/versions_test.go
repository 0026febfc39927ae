package networkpod

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// A network's setup asks its plugins VERSION once; a second network of the
// same image asks none: the host wrote the first one's answers into the
// second's state dir before it started.
func TestVersionsLearnedByImage(t *testing.T) {
	var mu sync.Mutex
	ready := map[string]string{} // network → setup's ready line
	p := newTestHost(t, func(o *Options) {
		onLog(o, logrus.InfoLevel, func(e *logrus.Entry) {
			if strings.Contains(e.Message, "cni-wrapper setup") && strings.Contains(e.Message, " ready ") {
				mu.Lock()
				ready[e.Data["network"].(string)] = e.Message
				mu.Unlock()
			}
		})
	})
	img := netplugImage(t)
	conf := func(name, subnet string) []byte {
		return []byte(`{"cniVersion":"1.0.0","name":"` + name + `","type":"bridge","bridge":"kt-ver0",` +
			`"ipam":{"type":"host-local","subnet":"` + subnet + `"}}`)
	}
	readyOf := func(network string) string {
		mu.Lock()
		defer mu.Unlock()
		return ready[network]
	}
	readyLine := func(network string) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if ready[network] == "" {
				return errors.New("no ready line from " + network + "'s setup yet")
			}
			return nil
		}
	}
	startGenerations(t, p, Spec{Network: "ktvera", Definition: gendef.Definition{Image: img, Config: conf("ktvera", "10.221.0.0/24")}})
	testutil.WaitFor(t, 30*time.Second, "ktvera's setup to be ready", readyLine("ktvera"))
	if line := readyOf("ktvera"); !strings.Contains(line, "asked=2") {
		t.Errorf("the image's first network: setup's ready line %q, want asked=2 (bridge, host-local)", line)
	}
	if _, err := os.Stat(filepath.Join(p.pluginStateHostDir("ktvera"), netplugin.VersionsFile)); err != nil {
		t.Fatalf("setup left no versions in its state dir: %v", err)
	}

	startGenerations(t, p, Spec{Network: "ktverb", Definition: gendef.Definition{Image: img, Config: conf("ktverb", "10.221.1.0/24")}})
	testutil.WaitFor(t, 30*time.Second, "ktverb's setup to be ready", readyLine("ktverb"))
	if line := readyOf("ktverb"); !strings.Contains(line, "asked=0") {
		t.Errorf("a second network of the image: setup's ready line %q, want asked=0", line)
	}
}
