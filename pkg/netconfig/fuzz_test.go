package netconfig

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"
)

// FuzzParse checks that Parse never panics, that a rejected config always
// comes with at least one located problem, and that an accepted one only
// holds valid networks whose plugin configs are valid JSON without kurma's
// keys.
func FuzzParse(f *testing.F) {
	if example, err := os.ReadFile("../../examples/pod_networks.json"); err == nil {
		f.Add(example)
	}
	for _, s := range []string{
		``,
		`{}`,
		`[]`,
		`null`,
		`{"pod_networks": []}`,
		`{"podNetworks": [{"name": "a", "image": "file:///a"}]}`,
		`{"pod_networks": [], "podNetworks": []}`,
		`{"pod_networks": [{"name": "a", "image": "file://x", "default": true, "containerInterface": "eth{{num}}", "type": "bridge", "args": {"cni": {"IP": "1"}}}]}`,
		`{"pod_networks": [{"name": "a", "image": "file://x"}, {"name": "a", "image": "docker://busybox"}]}`,
		`{"pod_networks": [{"name": "a", "image": "example.com/n:v1,os=linux", "containerInterface": "{{random 15}}"}]}`,
		`{"pod_networks": [{"name": "a", "image": "https://h/x", "containerInterface": "{{range 99999999}}{{end}}"}]}`,
		`{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "{{printf \"%999999d\" 1}}"}]}`,
		`{"pod_networks": [{"name": "a", "image": "file:///x", "name": "b"}]}`,
		`{"pod_networks": [{"name": "a", "image": "file:///x", "args": {"cni": 1}}]}`,
		`{"plugin_timeout": "1m", "state_dir": "/a", "run_dir": "/b", "insecure_registries": ["h:1"], "trusted_keys": [{"prefix": "p", "key": "k"}], "insecure_discovery": true}`,
		`{"plugin_timeout": "-1s", "state_dir": "a", "insecure_registries": [1], "trusted_keys": [{}]}`,
		"{\"pod_network\": 1,\n\"x\": }",
		`{"a":1,"a":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "/etc/kurma")
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("error %v (%T) is not a ValidationError with problems", err, err)
			}
			if c != nil {
				t.Fatal("config returned with an error")
			}
			return
		}
		if c.PluginTimeout <= 0 || c.StateDir == "" || c.RunDir == "" {
			t.Fatalf("bad settings %+v", c)
		}
		seen := map[string]bool{}
		for _, n := range c.Networks {
			if checkName(n.Name) != "" || seen[n.Name] || n.ImageURI == "" {
				t.Fatalf("accepted bad network %+v", n)
			}
			seen[n.Name] = true
			for _, args := range [][]Arg{nil, {{"IP", "10.10.0.9"}, {"K", "V"}}} {
				b, err := n.PluginConfig(args)
				if err != nil {
					t.Fatalf("PluginConfig: %v", err)
				}
				var m map[string]json.RawMessage
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatalf("PluginConfig gave invalid JSON %q: %v", b, err)
				}
				for _, k := range kurmaEntryKeys {
					if _, ok := m[k]; ok {
						t.Fatalf("PluginConfig kept %q: %s", k, b)
					}
				}
				if _, ok := m[keyCNIVersion]; ok != (n.CNIVersion != "") {
					t.Fatalf("PluginConfig's cniVersion differs from the entry's %q: %s", n.CNIVersion, b)
				}
				if args == nil {
					// Nothing added, nothing changed: the entry minus kurma's keys.
					got, _ := decodeObject(b)
					want := slices.DeleteFunc(slices.Clone(n.members), func(m member) bool { return slices.Contains(kurmaEntryKeys, m.Key) })
					if n.IsPolicy() {
						// and the networks it polices, kurmad's
						want = append(want, n.policyMember())
					}
					if !slices.EqualFunc(got, want, func(a, b member) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
						t.Fatalf("PluginConfig(nil) = %s, not the entry minus kurma's keys", b)
					}
				}
			}
			if n.ContainerInterface != "" {
				name, err := NewInterfaceNamer(sampleUUID).Name(n)
				if err == nil && checkInterfaceName(name) != "" {
					t.Fatalf("rendered invalid name %q", name)
				}
			}
		}
		if !slices.Equal(c.Names(), names(c.Networks)) {
			t.Fatalf("Names() = %v", c.Names())
		}
	})
}

// FuzzInterfaceNamer checks that rendering any template never panics and
// never hands out an invalid or duplicate interface name, nor one of the
// pod's links.
func FuzzInterfaceNamer(f *testing.F) {
	for _, s := range []string{
		"eth0", "eth{{num}}", "veth{{shortuuid}}{{num}}", "{{uuid}}", "{{random 15}}", "{{random 16}}",
		"e{{random 1}}", "{{random 0}}", "{{", "{{nope}}", "{{.}}", "{{.X}}", "..", "a/b", " ", "",
		`{{printf "%s%s" uuid uuid}}`, `{{if num}}x{{num}}{{else}}eth0{{end}}`, `{{range 3}}a{{end}}`,
		`{{define "x"}}{{template "x"}}{{end}}{{template "x"}}`, `{{with uuid}}{{.}}{{end}}`,
		`{{slice uuid 0 99}}`, `{{index uuid 99}}`, `{{call num}}`, `{{$x := random 3}}{{$x}}{{$x}}`,
		`{{printf "%99999999d" 1}}`, `e{{num}}{{num}}{{num}}{{num}}`,
	} {
		f.Add(s, testUUID, uint8(3))
	}
	f.Add("{{uuid}}", "", uint8(1))
	f.Add("x{{shortuuid}}", "a/b:c d", uint8(2))
	f.Fuzz(func(t *testing.T, tmpl, podUUID string, count uint8) {
		n := &Network{Name: "fz", ContainerInterface: tmpl}
		r := NewInterfaceNamer(podUUID)
		links := []string{"lo", "eth0", "eth2"}
		r.SetLinks(links)
		given := map[string]bool{}
		for i := 0; i < int(count%20)+1; i++ {
			name, err := r.Name(n)
			if err != nil {
				continue
			}
			if slices.Contains(links, name) {
				t.Fatalf("template %q gave %q, a link of the pod", tmpl, name)
			}
			if msg := checkInterfaceName(name); msg != "" {
				t.Fatalf("template %q gave invalid name: %s", tmpl, msg)
			}
			if given[name] {
				t.Fatalf("template %q gave %q twice", tmpl, name)
			}
			given[name] = true
		}
	})
}
