package netconfig

import (
	"encoding/json"

	"reflect"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/gendef"
)

func mustNetwork(t *testing.T, entry string) *Network {
	t.Helper()
	c, err := Parse([]byte(`{"pod_networks": [`+entry+`]}`), "/etc/kurma")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c.Networks[0]
}

func TestPluginConfig(t *testing.T) {
	tests := []struct {
		name  string
		entry string
		args  []Arg
		want  string
	}{
		{"strips kurma keys, keeps order and raw values",
			`{"image": "file:///x.aci", "name": "a", "default": true, "type": "bridge",
			  "containerInterface": "eth{{num}}", "allow_capabilities": ["CAP_BPF"], "ipam": {"type" : "host-local", "subnet": "10.10.0.0/16"},
			  "zeta": [1, 2.50, 1e3], "alpha": null, "html": "a<b&c>\u00e9"}`,
			nil,
			`{"name":"a","type":"bridge","ipam":{"type" : "host-local", "subnet": "10.10.0.0/16"},"zeta":[1, 2.50, 1e3],"alpha":null,"html":"a<b&c>\u00e9"}`},
		{"strips verify and image_name, kurma's trust keys",
			`{"name": "a", "image": "file:///x", "verify": "none", "type": "bridge", "image_name": "example.com/kurma/net"}`,
			nil,
			`{"name":"a","type":"bridge"}`},
		{"keeps an existing cniVersion where it is",
			`{"name": "a", "image": "file:///x", "type": "ptp", "cniVersion": "0.4.0"}`,
			nil,
			`{"name":"a","type":"ptp","cniVersion":"0.4.0"}`},
		{"adds no cniVersion: the plugin image decides",
			`{"name": "a", "image": "file:///x", "type": "ptp"}`,
			nil,
			`{"name":"a","type":"ptp"}`},
		{"conflist",
			`{"name": "a", "image": "file:///x", "cniVersion": "1.0.0", "plugins": [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`,
			nil,
			`{"name":"a","cniVersion":"1.0.0","plugins":[{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`},
		{"empty args change nothing",
			`{"name": "a", "image": "file:///x", "type": "bridge"}`,
			[]Arg{},
			`{"name":"a","type":"bridge"}`},
		{"args added at the end",
			`{"name": "a", "image": "file:///x", "type": "bridge"}`,
			[]Arg{{"IP", "10.10.0.9"}, {"K", "V"}},
			`{"name":"a","type":"bridge","args":{"cni":{"IP":"10.10.0.9","K":"V"}}}`},
		{"args object without cni",
			`{"name": "a", "image": "file:///x", "args": {"labels": [ 1 ]}, "type": "bridge"}`,
			[]Arg{{"IP", "10.10.0.9"}},
			`{"name":"a","args":{"labels":[ 1 ],"cni":{"IP":"10.10.0.9"}},"type":"bridge"}`},
		{"merged into args.cni, request wins, order kept",
			`{"name": "a", "image": "file:///x", "args": {"cni": {"ips": ["10.0.0.1/24"], "IP": "old"}, "x": 1}, "type": "bridge"}`,
			[]Arg{{"Z", "z"}, {"IP", "new"}},
			`{"name":"a","args":{"cni":{"ips":["10.0.0.1/24"],"IP":"new","Z":"z"},"x":1},"type":"bridge"}`},
		{"values are JSON-escaped strings",
			`{"name": "a", "image": "file:///x"}`,
			[]Arg{{"K", `a"b\c<d>`}, {"E", ""}},
			`{"name":"a","args":{"cni":{"K":"a\"b\\c<d>","E":""}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := mustNetwork(t, tt.entry)
			got, err := n.PluginConfig(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("PluginConfig =\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("output is not valid JSON: %s", got)
			}
			// The network itself is not changed by args.
			if len(tt.args) > 0 {
				again, _ := n.PluginConfig(nil)
				if strings.Contains(string(again), `"cni":{"`+tt.args[0].Key) {
					t.Errorf("args leaked into the network: %s", again)
				}
			}
		})
	}
}

func TestPluginConfigErrors(t *testing.T) {
	n := mustNetwork(t, `{"name": "a", "image": "file:///x"}`)
	for _, tt := range []struct {
		args []Arg
		want string
	}{
		{[]Arg{{"", "v"}}, `network "a": argument with an empty key (value "v")`},
		{[]Arg{{"IP", "1"}, {"IP", "2"}}, `network "a": argument "IP" given twice`},
	} {
		if _, err := n.PluginConfig(tt.args); err == nil || err.Error() != tt.want {
			t.Errorf("PluginConfig(%v) = %v; want %s", tt.args, err, tt.want)
		}
	}
}

func TestPluginConfigHandBuilt(t *testing.T) {
	got, err := (&Network{Name: "x", Definition: gendef.Definition{Source: gendef.Source{ImageURI: "file:///x"}}}).PluginConfig([]Arg{{"IP", "1.2.3.4"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"x","args":{"cni":{"IP":"1.2.3.4"}}}`; string(got) != want {
		t.Errorf("got %s; want %s", got, want)
	}
}

func TestParseNetworkRef(t *testing.T) {
	tests := []struct {
		ref     string
		name    string
		args    []Arg
		wantErr string
	}{
		{ref: "mynet", name: "mynet"},
		{ref: "other:IP=10.1.0.9;K=V", name: "other", args: []Arg{{"IP", "10.1.0.9"}, {"K", "V"}}},
		{ref: "a:K=", name: "a", args: []Arg{{"K", ""}}},
		{ref: "a:K=x=y", name: "a", args: []Arg{{"K", "x=y"}}},
		{ref: "a:MAC=aa:bb:cc:dd:ee:ff", name: "a", args: []Arg{{"MAC", "aa:bb:cc:dd:ee:ff"}}},
		{ref: "", wantErr: `network reference "": empty network name`},
		{ref: ":IP=1", wantErr: `network reference ":IP=1": empty network name`},
		{ref: "My.Net_1-x:IP=1", name: "My.Net_1-x", args: []Arg{{"IP", "1"}}},
		{ref: "_bad:IP=1", wantErr: `network reference "_bad:IP=1": "_bad" is not a valid network name`},
		{ref: "a:", wantErr: `network reference "a:": no arguments after ':'`},
		{ref: "a:IP", wantErr: `network reference "a:IP": "IP" is not a KEY=VALUE pair`},
		{ref: "a:=v", wantErr: `network reference "a:=v": "=v" is not a KEY=VALUE pair`},
		{ref: "a:IP=1;;K=2", wantErr: `"" is not a KEY=VALUE pair`},
		{ref: "a:IP=1;", wantErr: `"" is not a KEY=VALUE pair`},
		{ref: "a:IP=1;IP=2", wantErr: `network reference "a:IP=1;IP=2": argument "IP" given twice`},
	}
	for _, tt := range tests {
		name, args, err := ParseNetworkRef(tt.ref)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseNetworkRef(%q) error = %v; want %q", tt.ref, err, tt.wantErr)
			}
			continue
		}
		if err != nil || name != tt.name || !reflect.DeepEqual(args, tt.args) {
			t.Errorf("ParseNetworkRef(%q) = %q, %v, %v; want %q, %v", tt.ref, name, args, err, tt.name, tt.args)
		}
	}
}

// TestRefToPluginConfig is the path a pod request takes: ref → args → stdin.
func TestRefToPluginConfig(t *testing.T) {
	n := mustNetwork(t, `{"name": "mynet", "image": "file:///x", "type": "bridge"}`)
	name, args, err := ParseNetworkRef("mynet:IP=10.10.0.9")
	if err != nil || name != n.Name {
		t.Fatal(name, err)
	}
	got, err := n.PluginConfig(args)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"mynet","type":"bridge","args":{"cni":{"IP":"10.10.0.9"}}}`; string(got) != want {
		t.Errorf("got %s; want %s", got, want)
	}
}

func TestWithKey(t *testing.T) {
	conf := []byte(`{"name":"n","ipam":{ "type": "host-local" },"prevResult":{"old":1}}`)
	tests := []struct {
		key, value, want string
	}{
		{"prevResult", `{"cniVersion":"1.0.0"}`, `{"name":"n","ipam":{ "type": "host-local" },"prevResult":{"cniVersion":"1.0.0"}}`},
		{"cni.dev/valid-attachments", `[{"containerID":"a","ifname":"eth0"}]`,
			`{"name":"n","ipam":{ "type": "host-local" },"prevResult":{"old":1},"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`},
	}
	for _, tt := range tests {
		got, err := WithKey(conf, tt.key, json.RawMessage(tt.value))
		if err != nil || string(got) != tt.want {
			t.Errorf("WithKey(%s) = %s, %v; want %s", tt.key, got, err, tt.want)
		}
	}
	if _, err := WithKey([]byte(`[]`), "k", json.RawMessage(`1`)); err == nil {
		t.Error("WithKey on an array succeeded")
	}
	if _, err := WithKey(conf, "k", json.RawMessage(`{`)); err == nil {
		t.Error("WithKey with a value that is not JSON succeeded")
	}
}
