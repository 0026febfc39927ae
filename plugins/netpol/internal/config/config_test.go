package config

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	c, err := Parse(strings.NewReader(`{"cniVersion": "1.0.0", "name": "policy", "type": "netpol",
		"policy_networks": ["podnet", "web"], "cluster_network": "podnet", "fail_open": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "policy" || len(c.PolicyNetworks) != 2 || c.ClusterNetwork != "podnet" || !c.FailOpen || c.Queue != DefaultQueue {
		t.Fatalf("got %+v", c)
	}
	c, err = Parse(strings.NewReader(`{"policy_networks": [], "queue": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != DefaultName || c.Queue != 7 {
		t.Fatalf("defaults: got %+v", c)
	}
}

func TestParseProblems(t *testing.T) {
	tests := []struct {
		in   string
		want []string // substrings of the error, each a problem
	}{
		{`{"name": "p", "policy_networks": ["a"], "polcy": 1, "ipam": {}}`,
			[]string{`network "p": config:`, "ipam: unknown key", "polcy: unknown key"}},
		{`{"policy_networks": "a"}`, []string{"policy_networks: a JSON string where a list of strings is expected"}},
		{`{"name": "p"}`, []string{"policy_networks: missing"}},
		{`{"policy_networks": ["a", "a", ""], "queue": 70000}`,
			[]string{`policy_networks[1]: "a" is listed twice`, "policy_networks[2]: empty", "queue: 70000 is not"}},
		{`{"policy_networks": [], "fail_open": "yes"}`, []string{"fail_open: a JSON string where true or false is expected"}},
		{`[1]`, []string{"not a JSON object"}},
		{`{"name": "a b", "policy_networks": []}`, []string{`name: "a b" is not a network name`}},
	}
	for _, tt := range tests {
		_, err := Parse(strings.NewReader(tt.in))
		if err == nil {
			t.Errorf("%s: no error", tt.in)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tt.in, err, w)
			}
		}
	}
}
