package netconfig

import (
	"slices"
	"testing"
)

// TestCanonical: layout (whitespace, key order, escapes) goes; meaning
// (values, numbers as written, list order) stays.
func TestCanonical(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{ "b" : 1 ,"a":[ 2, {"d": true, "c": null} ] }`, `{"a":[2,{"c":null,"d":true}],"b":1}`},
		{`"\u0041<b"`, `"A<b"`},
		{`1.50`, `1.50`},
		{"\n[ ]\n", `[]`},
	} {
		got, err := Canonical([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := Canonical([]byte(`{} {}`)); err == nil {
		t.Error("two values: no error")
	}
}

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
