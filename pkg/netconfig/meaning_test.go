package netconfig

import (
	"slices"
	"testing"
)

// TestChangedKeys: what changed between two entries of a network is named
// by key, or by path into it; a layout change is none; "aci" is "image".
func TestChangedKeys(t *testing.T) {
	parse := func(entry string) *Network {
		t.Helper()
		cfg, err := Parse([]byte(`{"pod_networks": [`+entry+`]}`), "/etc/kurma")
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Networks[0]
	}
	base := parse(`{"name": "w", "image": "file:///x.aci", "plugins": [{"type": "bridge", "bridge": "w0"}, {"type": "portmap"}]}`)
	for _, tt := range []struct {
		entry string
		want  []string
	}{
		{`{"plugins": [ {"bridge": "w0", "type": "bridge"}, {"type": "portmap"} ], "aci": "file:///x.aci", "name": "w"}`, nil},
		{`{"name": "w", "image": "file:///x.aci", "plugins": [{"type": "bridge", "bridge": "w1"}, {"type": "portmap"}]}`, []string{"plugins[0].bridge"}},
		{`{"name": "w", "image": "file:///x.aci", "plugins": [{"type": "bridge", "bridge": "w0"}]}`, []string{"plugins"}},
		{`{"name": "w", "image": "file:///y.aci", "default": true, "plugins": [{"type": "bridge", "bridge": "w0"}, {"type": "portmap", "x": 1}]}`,
			[]string{"image", "default", "plugins[1].x"}},
	} {
		if got := ChangedKeys(base, parse(tt.entry)); !slices.Equal(got, tt.want) {
			t.Errorf("ChangedKeys to %s = %q, want %q", tt.entry, got, tt.want)
		}
	}
}
