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

// Networks of one image started together, none of whose answers are
// known (a cold boot): one setup asks its plugins, the others wait for
// its answers and ask none.
func TestVersionsAskedOnceByNetworksStartedTogether(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]string{} // network → asked=N of setup's ready line
	p := newTestHost(t, func(o *Options) {
		onLog(o, logrus.InfoLevel, func(e *logrus.Entry) {
			if strings.Contains(e.Message, "cni-wrapper setup") && strings.Contains(e.Message, " ready ") {
				for _, f := range strings.Fields(e.Message) {
					if strings.HasPrefix(f, "asked=") {
						mu.Lock()
						asked[e.Data["network"].(string)] = f
						mu.Unlock()
					}
				}
			}
		})
	})
	img := netplugImage(t)
	var specs []Spec
	for i, name := range []string{"ktvtog0", "ktvtog1", "ktvtog2", "ktvtog3"} {
		conf := `{"cniVersion":"1.0.0","name":"` + name + `","type":"bridge","bridge":"kt-ver1",` +
			`"ipam":{"type":"host-local","subnet":"10.221.` + string(rune('4'+i)) + `.0/24"}}`
		specs = append(specs, Spec{Network: name, Definition: gendef.Definition{Image: img, Config: []byte(conf)}})
	}
	startGenerations(t, p, specs...)
	testutil.WaitFor(t, 60*time.Second, "every setup to be ready", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(asked) < len(specs) {
			return errors.New("not every setup is ready yet")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, a := range asked {
		if a != "asked=0" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("setups that asked their plugins: %d of %d (%v), want one", n, len(specs), asked)
	}
}

// A network whose image does not declare kurma's cni-wrapper never waits
// for another network's answers, even while one of its image "probes":
// its main writes none, and the wait would delay every start of it.
func TestVersionsNoWaitWithoutWrapper(t *testing.T) {
	h := &Host{opts: Options{StateDir: t.TempDir()}}
	img := &gendef.Image{ID: "sha512-legacy"}
	h.versions.probing = map[string]chan struct{}{img.ID: make(chan struct{})} // never ends
	stop := make(chan struct{})
	timer := time.AfterFunc(3*time.Second, func() { close(stop) })
	defer timer.Stop()
	start := time.Now()
	h.seedVersions(Spec{Network: "ktlegacy", Definition: gendef.Definition{Image: img}}, stop, nil)()
	if took := time.Since(start); took > time.Second {
		t.Errorf("a network of an image without the wrapper waited %v for another's answers", took)
	}
}
