package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// logEvents is a logrus hook that records every message in the order it
// was logged and runs the function registered for a message, in the
// logging goroutine, at the instant it is logged.
type logEvents struct {
	mu   sync.Mutex
	seen []string
	at   map[string]func(*logrus.Entry)
}

func (h *logEvents) Levels() []logrus.Level { return logrus.AllLevels }

func (h *logEvents) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	h.seen = append(h.seen, e.Message)
	fn := h.at[e.Message]
	h.mu.Unlock()
	if fn != nil {
		fn(e)
	}
	return nil
}

// on registers fn for message; call it before the daemon logs.
func (h *logEvents) on(message string, fn func(*logrus.Entry)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at == nil {
		h.at = map[string]func(*logrus.Entry){}
	}
	h.at[message] = fn
}

// index is the position of message's first occurrence, -1 when not seen.
func (h *logEvents) index(message string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, m := range h.seen {
		if m == message {
			return i
		}
	}
	return -1
}

// testLogger logs to t at info level (debug with -v) through events.
func testLogger(t testing.TB, events *logEvents) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(testutil.LogWriter(t))
	if testing.Verbose() {
		log.SetLevel(logrus.DebugLevel)
	}
	if events != nil {
		log.AddHook(events)
	}
	return log
}

// network is one pod_networks entry of a test config.
type network struct {
	Name, Image string
	Default     bool
	Conf        map[string]any // the plugin's own keys
}

// testConfig is a validated config with its state and run dirs under dir.
// The dir must be short: unix socket paths under the run dir are limited.
func testConfig(t testing.TB, dir string, nets ...network) *netconfig.Config {
	t.Helper()
	list := []map[string]any{}
	for _, n := range nets {
		m := map[string]any{"name": n.Name, "image": n.Image}
		if n.Default {
			m["default"] = true
		}
		for k, v := range n.Conf {
			m[k] = v
		}
		list = append(list, m)
	}
	data, err := json.Marshal(map[string]any{
		"state_dir":      filepath.Join(dir, "state"),
		"run_dir":        filepath.Join(dir, "run"),
		"plugin_timeout": "20s",
		"pod_networks":   list,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconfig.Parse(data, dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// netplugACI is the file:// URI of the cni-netplugin image `make images`
// builds; its setup accepts a config of type loopback with nothing else.
func netplugACI(t testing.TB) string {
	return "file://" + testutil.BuiltImage(t, "cni-netplugin.aci")
}

// loopbackNet is a network whose plugin container really runs.
func loopbackNet(t testing.TB, name string) network {
	return network{Name: name, Image: netplugACI(t), Conf: map[string]any{"type": "loopback"}}
}

// openedDaemon is a Daemon on cfg whose journal, image store and networks
// are open, nothing started, for tests of the logic between them that need
// no root.
func openedDaemon(t testing.TB, cfg *netconfig.Config) *Daemon {
	t.Helper()
	d, err := New(Options{Config: cfg, Version: "test", Logger: testLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.openJournal(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.store.Close() })
	if err := d.openImages(); err != nil {
		t.Fatal(err)
	}
	d.agentPath, d.initPath = os.Args[0], os.Args[0] // never started
	if err := d.newNetworks(); err != nil {
		t.Fatal(err)
	}
	return d
}

// fetch puts uri's image in d's store.
func fetch(t testing.TB, d *Daemon, uri string) *imagefetch.Image {
	t.Helper()
	img, err := d.fetcher.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// shortDir is a fresh temp dir with a short path (testutil.ShortDir).
func shortDir(t testing.TB) string { return testutil.ShortDir(t, "ktd") }

// imageOf returns the image ID the serving generation of network runs
// from, "" when it has none (yet): what the tests check a boot or reload
// against.
func (d *Daemon) imageOf(network string) string {
	_, to := d.nets.Serving()
	return to[network].Image
}
