package cniwrap_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/cniwrap"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name      string
		conf      string
		wantErr   string
		wantTypes []string
		wantArgs  []string // each plugin's args as JSON
	}{
		{name: "single", conf: `{"cniVersion":"1.0.0","name":"a","type":"bridge","ipam":{"type":"host-local"},"args":{"cni":{"IP":"1.2.3.4"}}}`,
			wantTypes: []string{"bridge", "host-local"}, wantArgs: []string{`{"cni":{"IP":"1.2.3.4"}}`}},
		{name: "conflist args merged", conf: `{"cniVersion":"1.0.0","name":"a","args":{"cni":{"IP":"1.2.3.4","x":"list"}},
			"plugins":[{"type":"bridge","ipam":{"type":"static"}},{"type":"tuning","args":{"cni":{"x":"own"}}},{"type":"bridge"}]}`,
			wantTypes: []string{"bridge", "static", "tuning"},
			wantArgs:  []string{`{"cni":{"IP":"1.2.3.4","x":"list"}}`, `{"cni":{"IP":"1.2.3.4","x":"own"}}`, `{"cni":{"IP":"1.2.3.4","x":"list"}}`}},
		{name: "no type", conf: `{"cniVersion":"1.0.0","name":"a"}`, wantErr: "type"},
		{name: "no name", conf: `{"cniVersion":"1.0.0","type":"bridge"}`, wantErr: "name"},
		{name: "empty plugins", conf: `{"cniVersion":"1.0.0","name":"a","plugins":[]}`, wantErr: "no plugins"},
		{name: "not json", conf: `[`, wantErr: "JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := cniwrap.ParseConfig([]byte(tt.conf))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cniwrap.PluginTypes(list); !reflect.DeepEqual(got, tt.wantTypes) {
				t.Errorf("plugin types %v, want %v", got, tt.wantTypes)
			}
			for i, want := range tt.wantArgs {
				var m struct{ Args json.RawMessage }
				if err := json.Unmarshal(list.Plugins[i].Bytes, &m); err != nil {
					t.Fatal(err)
				}
				if string(m.Args) != want {
					t.Errorf("plugins[%d].args = %s, want %s", i, m.Args, want)
				}
			}
		})
	}
}

func TestCNIArgs(t *testing.T) {
	tests := []struct {
		conf string
		want [][2]string
	}{
		{`{}`, nil},
		{`{"args":{"cni":{"ips":["1.2.3.4"]}}}`, nil},
		{`{"args":{"cni":{"MAC":"aa:bb:cc:dd:ee:ff","IP":"10.0.0.5","n":3,"b":true,"bad;key":"x","v":"a;b"}}}`,
			[][2]string{{"IgnoreUnknown", "1"}, {"IP", "10.0.0.5"}, {"MAC", "aa:bb:cc:dd:ee:ff"}, {"b", "true"}, {"n", "3"}}},
	}
	for _, tt := range tests {
		if got := cniwrap.CNIArgs([]byte(tt.conf)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("cniArgs(%s) = %v, want %v", tt.conf, got, tt.want)
		}
	}
}
