package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	tests := []struct {
		argv     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"/opt/network/frob"}, 2, "install it as add"},
		{[]string{"cni-wrapper"}, 2, "install it as add"},
		{[]string{"/opt/network/add"}, 1, "usage"},
		{[]string{"cni-wrapper", "del", "/x"}, 1, "usage"},
		{[]string{"/opt/network/check", "a", "b", "c", "d"}, 1, "usage"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.argv, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.argv, strings.NewReader(`{"cniVersion":"0.4.0","name":"n","type":"bridge"}`), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("code %d stderr %q, want %d and %q", code, stderr.String(), tt.wantCode, tt.wantErr)
			}
			if code == 1 {
				var e cniError
				if err := json.Unmarshal(stdout.Bytes(), &e); err != nil || e.CNIVersion != "0.4.0" || e.Code == 0 {
					t.Errorf("stdout %q is not a CNI error object of version 0.4.0", stdout.String())
				}
			}
		})
	}
}

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
			list, err := parseConfig([]byte(tt.conf))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pluginTypes(list); !reflect.DeepEqual(got, tt.wantTypes) {
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
		if got := cniArgs([]byte(tt.conf)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("cniArgs(%s) = %v, want %v", tt.conf, got, tt.want)
		}
	}
}
