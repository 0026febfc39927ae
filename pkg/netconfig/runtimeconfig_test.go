package netconfig

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCNICapabilities(t *testing.T) {
	tests := []struct {
		name, entry string
		want        []string
	}{
		{"single config", `{"name": "a", "image": "file:///x", "type": "bridge", "capabilities": {"mac": true, "ips": true, "aliases": false}}`,
			[]string{"ips", "mac"}},
		{"conflist: the union of its plugins'", `{"name": "a", "image": "file:///x", "plugins": [
			{"type": "bridge", "capabilities": {"ips": true}},
			{"type": "portmap", "capabilities": {"portMappings": true}},
			{"type": "bandwidth", "capabilities": {"bandwidth": true, "ips": true}},
			{"type": "tuning"}]}`,
			[]string{"bandwidth", "ips", "portMappings"}},
		{"none", `{"name": "a", "image": "file:///x", "type": "bridge"}`, []string{}},
		{"not an object of booleans declares nothing", `{"name": "a", "image": "file:///x", "type": "bridge", "capabilities": ["mac"]}`, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustNetwork(t, tt.entry).CNICapabilities(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CNICapabilities = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPluginConfigFor(t *testing.T) {
	const conflist = `{"name": "a", "image": "file:///x", "cniVersion": "1.0.0", "plugins": [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}, {"type": "bandwidth", "capabilities": {"bandwidth": true}}]}`
	pm := json.RawMessage(`[{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]`)
	tests := []struct {
		name, entry string
		args        []Arg
		rc          RuntimeConfig
		want        string
		dropped     []string
	}{
		{"declared capabilities placed at the end, sorted", conflist, nil,
			RuntimeConfig{"portMappings": pm, "bandwidth": json.RawMessage(`{"ingressRate":1000,"ingressBurst":1000}`)},
			`{"name":"a","cniVersion":"1.0.0","plugins":[{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}, {"type": "bandwidth", "capabilities": {"bandwidth": true}}],"runtimeConfig":{"bandwidth":{"ingressRate":1000,"ingressBurst":1000},"portMappings":[{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}`,
			nil},
		{"undeclared ones dropped, as libcni does", conflist, nil,
			RuntimeConfig{"portMappings": pm, "mac": json.RawMessage(`"c2:00:00:00:00:01"`), "ips": json.RawMessage(`["10.0.0.9"]`)},
			`{"name":"a","cniVersion":"1.0.0","plugins":[{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}, {"type": "bandwidth", "capabilities": {"bandwidth": true}}],"runtimeConfig":{"portMappings":[{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}`,
			[]string{"ips", "mac"}},
		{"nothing declared: PluginConfig's bytes", `{"name": "a", "image": "file:///x", "type": "bridge"}`, nil,
			RuntimeConfig{"mac": json.RawMessage(`"c2:00:00:00:00:01"`)},
			`{"name":"a","type":"bridge"}`, []string{"mac"}},
		{"with args, single config", `{"name": "a", "image": "file:///x", "type": "tuning", "capabilities": {"mac": true}}`,
			[]Arg{{"IP", "10.0.0.9"}}, RuntimeConfig{"mac": json.RawMessage(`"c2:00:00:00:00:01"`)},
			`{"name":"a","type":"tuning","capabilities":{"mac": true},"args":{"cni":{"IP":"10.0.0.9"}},"runtimeConfig":{"mac":"c2:00:00:00:00:01"}}`, nil},
		{"the entry's own runtimeConfig is replaced", `{"name": "a", "image": "file:///x", "type": "tuning", "runtimeConfig": {"x": 1}, "capabilities": {"mac": true}}`,
			nil, RuntimeConfig{"mac": json.RawMessage(`"c2:00:00:00:00:01"`)},
			`{"name":"a","type":"tuning","runtimeConfig":{"mac":"c2:00:00:00:00:01"},"capabilities":{"mac": true}}`, nil},
		{"no runtime config", conflist, nil, nil,
			`{"name":"a","cniVersion":"1.0.0","plugins":[{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}, {"type": "bandwidth", "capabilities": {"bandwidth": true}}]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped, err := mustNetwork(t, tt.entry).PluginConfigFor(tt.args, tt.rc)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("PluginConfigFor =\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("not valid JSON: %s", got)
			}
			if !reflect.DeepEqual(dropped, tt.dropped) {
				t.Errorf("dropped = %q, want %q", dropped, tt.dropped)
			}
		})
	}
}

func TestInterfaceNamerClaim(t *testing.T) {
	first := &Network{Name: "first"}
	second := &Network{Name: "second"}
	r := NewInterfaceNamer(sampleUUID)
	r.SetLinks([]string{"lo", "eth0"})
	if got, err := r.Claim(first, "net1"); err != nil || got != "net1" {
		t.Fatalf("Claim(net1) = %q, %v", got, err)
	}
	// The next network without a template gets the first free ethN: eth0
	// is a link, so eth1.
	if got, err := r.Name(second); err != nil || got != "eth1" {
		t.Fatalf("Name after Claim = %q, %v; want eth1", got, err)
	}
	for _, tt := range []struct{ ifname, want string }{
		{"eth0", `a link "eth0" already in the network namespace`},
		{"net1", `network "first"`},
	} {
		_, err := namerWith(t, "eth0", first).Claim(second, tt.ifname)
		if !errors.Is(err, ErrInterfaceConflict) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Claim(%s) = %v; want ErrInterfaceConflict naming %s", tt.ifname, err, tt.want)
		}
	}
	if _, err := r.Claim(second, "a/b"); err == nil || errors.Is(err, ErrInterfaceConflict) {
		t.Errorf("Claim(a/b) = %v; want an invalid-name error", err)
	}
}

// namerWith is a namer whose pod holds link and gave net1 to
// owner.
func namerWith(t *testing.T, link string, owner *Network) *InterfaceNamer {
	t.Helper()
	r := NewInterfaceNamer(sampleUUID)
	r.SetLinks([]string{"lo", link})
	if _, err := r.Claim(owner, "net1"); err != nil {
		t.Fatal(err)
	}
	return r
}
