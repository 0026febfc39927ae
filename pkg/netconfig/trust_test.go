package netconfig

import (
	"reflect"
	"strings"
	"testing"
)

// Two trusted keys for different prefixes: without image_name the signing
// key of a file:// or http(s):// image would be chosen by the name the
// image gives itself, so the config is refused at load, naming the entry
// and the fix. docker:// and appc names bind the name through the URI; a
// single key trusted for every name chooses nothing by name.
func TestImageNameRequiredWithPrefixedKeys(t *testing.T) {
	const keys = `"trusted_keys": [{"prefix": "a.example/", "key": "/k/a.asc"}, {"prefix": "b.example/", "key": "/k/b.asc"}]`
	refused := []string{
		`{"name": "n", "image": "file:///srv/x.aci"}`,
		`{"name": "n", "image": "https://img.example/x.aci"}`,
		`{"name": "n", "image": "http://img.example/x.aci#sha512-` + strings.Repeat("0", 128) + `"}`,
	}
	for _, entry := range refused {
		_, err := Parse([]byte(`{"pod_networks": [`+entry+`], `+keys+`}`), "/")
		if err == nil {
			t.Errorf("%s: accepted without image_name", entry)
			continue
		}
		ps := problemsOf(t, err)
		if len(ps) != 1 || ps[0].Path != "pod_networks[0]" || !strings.Contains(ps[0].Msg, `add "image_name"`) {
			t.Errorf("%s: %v; want one problem at pod_networks[0] with the image_name hint", entry, ps)
		}
	}
	accepted := []string{
		`{"pod_networks": [{"name": "n", "image": "file:///srv/x.aci", "image_name": "a.example/x"}], ` + keys + `}`,
		`{"pod_networks": [{"name": "n", "image": "file:///srv/x.aci", "verify": "if-signed"}], ` + keys + `}`,
		`{"pod_networks": [{"name": "n", "image": "a.example/x:1.0"}], ` + keys + `}`,
		`{"pod_networks": [{"name": "n", "image": "docker://reg.example/x:1"}], ` + keys + `}`,
		`{"pod_networks": [{"name": "n", "image": "file:///srv/x.aci"}], "trusted_keys": [{"prefix": "", "key": "/k/all.asc"}]}`,
	}
	for _, cfg := range accepted {
		if _, err := Parse([]byte(cfg), "/"); err != nil {
			t.Errorf("%s: %v", cfg, err)
		}
	}
}

// An unpinned plain http:// image that no signature check covers runs
// only when its network says "verify": "none" itself: the default "none"
// (no keys, no policy) or a top-level "none" is refused at load.
func TestPlainHTTPNeedsTheNetworksOwnVerifyNone(t *testing.T) {
	pin := "#sha512-" + strings.Repeat("a", 128)
	for _, tt := range []struct {
		cfg     string
		refused bool
	}{
		{`{"pod_networks": [{"name": "n", "image": "http://img.example/x.aci"}]}`, true},
		{`{"verify": "none", "pod_networks": [{"name": "n", "image": "http://img.example/x.aci"}]}`, true},
		{`{"pod_networks": [{"name": "n", "image": "http://img.example/x.aci", "verify": "none"}]}`, false},
		{`{"pod_networks": [{"name": "n", "image": "http://img.example/x.aci` + pin + `"}]}`, false},
		{`{"pod_networks": [{"name": "n", "image": "https://img.example/x.aci"}]}`, false},
		// Checked at fetch: an unsigned image is refused there.
		{`{"pod_networks": [{"name": "n", "image": "http://img.example/x.aci", "verify": "if-signed"}]}`, false},
	} {
		_, err := Parse([]byte(tt.cfg), "/")
		if !tt.refused {
			if err != nil {
				t.Errorf("%s: %v", tt.cfg, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", tt.cfg)
			continue
		}
		ps := problemsOf(t, err)
		if len(ps) != 1 || ps[0].Path != "pod_networks[0].image" || !strings.Contains(ps[0].Msg, `"verify": "none" in this network`) {
			t.Errorf("%s: %v", tt.cfg, ps)
		}
	}
}

func TestAllowSyscalls(t *testing.T) {
	c, err := Parse([]byte(`{"pod_networks": [{"name": "a", "image": "file:///a", "allow_syscalls": ["keyctl", "clone3"], "type": "x"}]}`), "/")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Networks[0].AllowSyscalls; !reflect.DeepEqual(got, []string{"keyctl", "clone3"}) {
		t.Errorf("AllowSyscalls = %v", got)
	}
	conf, err := c.Networks[0].PluginConfig(nil)
	if err != nil || strings.Contains(string(conf), "allow_syscalls") {
		t.Errorf("plugin config %s (%v): allow_syscalls is kurma's key", conf, err)
	}
	for _, tt := range []struct{ list, path, msg string }{
		{`["keyclt"]`, "pod_networks[0].allow_syscalls[0]", `did you mean "keyctl"?`},
		{`["read"]`, "pod_networks[0].allow_syscalls[0]", "not a system call the plugin containers' filter denies"},
		{`["mount", "mount"]`, "pod_networks[0].allow_syscalls[1]", "listed twice"},
		{`"mount"`, "pod_networks[0].allow_syscalls", "a list of system call names"},
	} {
		_, err := Parse([]byte(`{"pod_networks": [{"name": "a", "image": "file:///a", "allow_syscalls": `+tt.list+`}]}`), "/")
		if err == nil {
			t.Errorf("%s accepted", tt.list)
			continue
		}
		ps := problemsOf(t, err)
		if len(ps) != 1 || ps[0].Path != tt.path || !strings.Contains(ps[0].Msg, tt.msg) {
			t.Errorf("%s: %v; want %s: …%s…", tt.list, ps, tt.path, tt.msg)
		}
	}
}
