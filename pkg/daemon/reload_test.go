package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/imagefetch"
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

// TestFixedFetchTimeoutByItsValue: fetch_timeout absent and its default
// written out are the same bound, so a reload between them changes
// nothing; another value is refused with the bound that runs.
func TestFixedFetchTimeoutByItsValue(t *testing.T) {
	old := &netconfig.Config{}
	if ps := fixedSettings(old, &netconfig.Config{FetchTimeout: imagefetch.DefaultFetchTimeout}); len(ps) != 0 {
		t.Errorf("fetch_timeout written out as its default: %v", ps)
	}
	ps := fixedSettings(old, &netconfig.Config{FetchTimeout: 5 * time.Minute})
	if len(ps) != 1 || ps[0].Path != "fetch_timeout" || !strings.HasSuffix(ps[0].Msg, "or set it back to 10m0s") {
		t.Errorf("fetch_timeout changed: %v, want one problem saying to set it back to 10m0s", ps)
	}
}

// TestFixedMaxImageSizeByItsValue: max_image_size absent and its default
// written out are the same cap, so a reload between them changes nothing;
// another value is refused with the cap that runs.
func TestFixedMaxImageSizeByItsValue(t *testing.T) {
	old := &netconfig.Config{}
	if ps := fixedSettings(old, &netconfig.Config{MaxImageSize: imagefetch.DefaultMaxSize}); len(ps) != 0 {
		t.Errorf("max_image_size written out as its default: %v", ps)
	}
	if ps := fixedSettings(&netconfig.Config{MaxImageSize: imagefetch.DefaultMaxSize}, old); len(ps) != 0 {
		t.Errorf("max_image_size's default removed: %v", ps)
	}
	ps := fixedSettings(old, &netconfig.Config{MaxImageSize: 1 << 20})
	if len(ps) != 1 || ps[0].Path != "max_image_size" || !strings.HasSuffix(ps[0].Msg, "or set it back to 2147483648") {
		t.Errorf("max_image_size changed: %v, want one problem saying to set it back to 2147483648", ps)
	}
}
