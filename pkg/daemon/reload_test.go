package daemon

import (
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/netconfig"
)

// TestFixedSettingsSayTheWayBack: a reload that changes what cannot change
// while kurmad runs says how to put it back, whole: the running value, or,
// for a setting that was not set, to remove it.
func TestFixedSettingsSayTheWayBack(t *testing.T) {
	old := &netconfig.Config{StateDir: "/var/lib/kurma", RunDir: "/run/kurma"}
	cfg := &netconfig.Config{StateDir: "/srv/kurma", RunDir: "/run/kurma", MetricsListen: "127.0.0.1:9410",
		InsecureRegistries: []string{"localhost:5000"}}
	got := map[string]string{}
	for _, p := range fixedSettings(old, cfg) {
		got[p.Path] = p.Msg
	}
	for key, end := range map[string]string{
		"state_dir":           `or set it back to "/var/lib/kurma"`,
		"metrics_listen":      "or remove it (it was not set)",
		"insecure_registries": "or remove it (it was not set)",
	} {
		if !strings.HasSuffix(got[key], end) {
			t.Errorf("%s: %q, want it to end %q", key, got[key], end)
		}
	}
	if len(got) != 3 {
		t.Errorf("problems %v", got)
	}
}
