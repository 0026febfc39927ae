package netconfig

import (
	"slices"
	"strings"
	"testing"
)

// TestPolicyBad: every way a config gets the policy network wrong is
// reported at load, at the key at fault, with what to do.
func TestPolicyBad(t *testing.T) {
	const netpol = `{"name": "netpol", "image": "file:///netpol.aci", "role": "policy"}`
	tests := []struct {
		name string
		json string
		want []wantProblem
	}{
		{"role unknown", `{"pod_networks": [{"name": "a", "image": "file:///x", "role": "enforce"}]}`,
			[]wantProblem{{"pod_networks[0].role", `"enforce" is not a role; use "attach" (pods attach to it; the default) or "policy"`}}},
		{"role not a string", `{"pod_networks": [{"name": "a", "image": "file:///x", "role": true}]}`,
			[]wantProblem{{"pod_networks[0].role", `expected a string, "attach" (pods attach to it; the default) or "policy"`}}},
		{"network_policy not a boolean", `{"pod_networks": [` + netpol + `, {"name": "a", "image": "file:///x", "network_policy": "yes"}]}`,
			[]wantProblem{{"pod_networks[1].network_policy", `expected a boolean (true or false), got a string`}}},
		{"network_policy misspelt", `{"pod_networks": [` + netpol + `, {"name": "a", "image": "file:///x", "networkPolicy": true}]}`,
			[]wantProblem{{"pod_networks[1].networkPolicy", `did you mean "network_policy"?`}}},
		{"role in another case", `{"pod_networks": [{"name": "a", "image": "file:///x", "Role": "policy"}]}`,
			[]wantProblem{{"pod_networks[0].Role", `unknown key; did you mean "role"?`}}},
		{"role value misspelt", `{"pod_networks": [{"name": "a", "image": "file:///x", "role": "polcy"}]}`,
			[]wantProblem{{"pod_networks[0].role", `"polcy" is not a role; did you mean "policy"?`}}},
		{"network_policy with a slip", `{"pod_networks": [` + netpol + `, {"name": "a", "image": "file:///x", "netwrok_policy": true}]}`,
			[]wantProblem{{"pod_networks[1].netwrok_policy", `unknown key; did you mean "network_policy"?`}}},
		{"policy_networks with a slip", `{"pod_networks": [` + netpol + `, {"name": "a", "image": "file:///x", "policy_network": ["a"]}]}`,
			[]wantProblem{{"pod_networks[1].policy_network", `unknown key; did you mean "policy_networks"? kurmad writes that key into the policy network's config itself`}}},
		{"policy network as a default", `{"pod_networks": [{"name": "netpol", "image": "file:///n", "role": "policy", "default": true}]}`,
			[]wantProblem{{"pod_networks[0].default", `pods do not attach to a network of role "policy", so it takes no "default"; remove the key`}}},
		{"policy network with an interface", `{"pod_networks": [{"name": "netpol", "image": "file:///n", "role": "policy", "containerInterface": "eth0"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `pods do not attach to a network of role "policy", so it takes no "containerInterface"`}}},
		{"policy network opting in", `{"pod_networks": [{"name": "netpol", "image": "file:///n", "role": "policy", "network_policy": true}]}`,
			[]wantProblem{{"pod_networks[0].network_policy", `a network of role "policy" enforces policy on the others, it does not opt in to it; remove the key`}}},
		{"policy_networks written by the operator", `{"pod_networks": [{"name": "netpol", "image": "file:///n", "role": "policy", "policy_networks": ["a"]},
			{"name": "a", "image": "file:///x", "network_policy": true}]}`,
			[]wantProblem{{"pod_networks[0].policy_networks", `kurmad writes this key into the policy network's config: the names of the networks with "network_policy": true, in config order; remove it`}}},
		{"two policy networks", `{"pod_networks": [{"name": "a", "image": "file:///x"}, ` + netpol + `, {"name": "netpol2", "image": "file:///n2", "role": "policy"}]}`,
			[]wantProblem{{"pod_networks[2].role", `"netpol2" is a second network of role "policy" (also "netpol", pod_networks[1]); kurmad runs one policy network`}}},
		{"opted in without a policy network", `{"pod_networks": [{"name": "a", "image": "file:///x", "network_policy": true}, {"name": "b", "image": "file:///x", "network_policy": false},
			{"name": "c", "image": "file:///x", "network_policy": true}]}`,
			[]wantProblem{
				{"pod_networks[0].network_policy", `true needs a network of role "policy" to enforce it, and the config has none; add one, e.g. {"name": "netpol", "image": "file:///opt/kurma/images/netpol.aci", "role": "policy"}`},
				{"pod_networks[2].network_policy", `needs a network of role "policy"`},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.json), "/etc/kurma")
			if err == nil {
				t.Fatalf("Parse succeeded (%+v); want problems %v", cfg, tt.want)
			}
			got := problemsOf(t, err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				if got[i].Path != w.path || !strings.Contains(got[i].Msg, w.msg) {
					t.Errorf("problem %d = %q; want path %q and message containing %q", i, got[i], w.path, w.msg)
				}
			}
		})
	}
}

// TestPolicyNetworks: the policy network's plugin config ends with the
// networks that opted in, in config order; role and network_policy, being
// kurma's, reach no plugin; a network opting in or out keeps its own
// plugin config.
func TestPolicyNetworks(t *testing.T) {
	parse := func(doc string) *Config {
		t.Helper()
		c, err := Parse([]byte(doc), "/")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse(`{"pod_networks": [
		{"name": "web", "image": "file:///x", "network_policy": true, "type": "bridge"},
		{"name": "netpol", "image": "file:///n", "role": "policy", "cluster_network": "podnet"},
		{"name": "podnet", "image": "file:///x", "default": true, "network_policy": true, "type": "bridge"},
		{"name": "other", "image": "file:///x", "network_policy": false, "type": "bridge"}]}`)
	netpol, _ := c.Network("netpol")
	if !netpol.IsPolicy() || !slices.Equal(netpol.PolicyNetworks, []string{"web", "podnet"}) {
		t.Errorf("netpol: role %q, polices %v; want policy over [web podnet]", netpol.Role, netpol.PolicyNetworks)
	}
	conf, err := netpol.PluginConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"netpol","cluster_network":"podnet","policy_networks":["web","podnet"]}`; string(conf) != want {
		t.Errorf("netpol's plugin config %s, want %s", conf, want)
	}
	web, _ := c.Network("web")
	if web.Role != RoleAttach || !web.NetworkPolicy || web.IsPolicy() {
		t.Errorf("web: role %q, network_policy %v", web.Role, web.NetworkPolicy)
	}
	if got := c.AttachNames(); !slices.Equal(got, []string{"web", "podnet", "other"}) {
		t.Errorf("AttachNames = %v", got)
	}
	if got := c.Defaults(); len(got) != 1 || got[0].Name != "podnet" {
		t.Errorf("Defaults = %v", got)
	}
	webConf, _ := web.PluginConfig(nil)
	if want := `{"name":"web","type":"bridge"}`; string(webConf) != want {
		t.Errorf("web's plugin config %s, want %s (network_policy is kurma's)", webConf, want)
	}
	// web opts out: its plugin config is the same, netpol's is not.
	c2 := parse(`{"pod_networks": [
		{"name": "web", "image": "file:///x", "type": "bridge"},
		{"name": "netpol", "image": "file:///n", "role": "policy", "cluster_network": "podnet"},
		{"name": "podnet", "image": "file:///x", "default": true, "network_policy": true, "type": "bridge"}]}`)
	web2, _ := c2.Network("web")
	netpol2, _ := c2.Network("netpol")
	if conf, _ := web2.PluginConfig(nil); string(conf) != string(webConf) {
		t.Errorf("web opted out: plugin config %s, was %s", conf, webConf)
	}
	if conf, _ := netpol2.PluginConfig(nil); string(conf) != `{"name":"netpol","cluster_network":"podnet","policy_networks":["podnet"]}` {
		t.Errorf("netpol after web opted out: %s", conf)
	}
	// A policy network with nothing to police is told so.
	c3 := parse(`{"pod_networks": [{"name": "netpol", "image": "file:///n", "role": "policy", "role_note": 1}]}`)
	if conf, _ := c3.Networks[0].PluginConfig(nil); string(conf) != `{"name":"netpol","role_note":1,"policy_networks":[]}` {
		t.Errorf("netpol policing nothing: %s", conf)
	}
	// "role": "attach" is the default, written out.
	c4 := parse(`{"pod_networks": [{"name": "a", "image": "file:///x", "role": "attach", "default": true}]}`)
	if c4.Networks[0].IsPolicy() || len(c4.Defaults()) != 1 {
		t.Errorf(`"role": "attach": %+v`, c4.Networks[0])
	}
}
