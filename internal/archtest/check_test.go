package archtest

import (
	"strings"
	"testing"
)

// TestCheckNamesTheChain: a violation names the package, the import it
// must not have, the document's line and the shortest chain that brings
// it in; a rule kept is silent, and a package is not its own violation.
func TestCheckNamesTheChain(t *testing.T) {
	const podnet, state, netnsfile, host, lc = Module + "/pkg/podnet", Module + "/pkg/state", Module + "/pkg/netnsfile",
		Module + "/pkg/networkpod", "github.com/opencontainers/runc/libcontainer"
	g := Graph{
		podnet:    {state, netnsfile},
		state:     {"encoding/json", lc},
		netnsfile: {host},
		host:      {lc, Module + "/pkg/networkpod/agent"},
	}
	rules, err := ParseRules([]byte("# x\n## Import rules\n\n| package | must not import | why |\n|---|---|---|\n" +
		"| `pkg/podnet` and its tests | `pkg/networkpod/...`, `github.com/opencontainers/runc/...` | because |\n" +
		"| `pkg/state` | `kurma` | pure |\n| `pkg/networkpod` | `pkg/networkpod/...` | itself is fine |\n## Next\n| `x` | `y` | |\n"))
	if err != nil || len(rules) != 3 || !rules[0].WithTests || rules[1].WithTests || rules[0].Line != 6 {
		t.Fatalf("ParseRules = %+v, %v", rules, err)
	}
	vs := Check(g, rules[0], podnet)
	if len(vs) != 2 {
		t.Fatalf("Check = %v, want the plugin host and libcontainer", vs)
	}
	// libcontainer through the journal; the plugin host through netnsfile
	// (its own libcontainer and agent are not repeated).
	want := []string{
		"pkg/podnet must not import github.com/opencontainers/runc/... (docs/architecture.md line 6), but imports github.com/opencontainers/runc/libcontainer: pkg/podnet → pkg/state → github.com/opencontainers/runc/libcontainer",
		"pkg/podnet must not import pkg/networkpod/... (docs/architecture.md line 6), but imports pkg/networkpod: pkg/podnet → pkg/netnsfile → pkg/networkpod",
	}
	for i, v := range vs {
		if v.String() != want[i] {
			t.Errorf("violation %d:\n%s\nwant\n%s", i, v, want[i])
		}
	}
	if vs := Check(g, rules[1], state); len(vs) != 0 {
		t.Errorf("state imports nothing of kurma's, got %v", vs)
	}
	if vs := Check(g, rules[2], host); len(vs) != 1 || !strings.HasSuffix(vs[0].Chain[1], "/agent") {
		t.Errorf("networkpod must not import networkpod/...: %v (its own package is no violation, its agent is)", vs)
	}
}

func TestMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, path string
		want          bool
	}{
		{"kurma", Module + "/pkg/api", true},
		{"kurma", Module, true},
		{"kurma", "github.com/kurma-project/kurmax/y", false},
		{"pkg/networkpod/...", Module + "/pkg/networkpod", true},
		{"pkg/networkpod/...", Module + "/pkg/networkpod/agent", true},
		{"pkg/networkpod/...", Module + "/pkg/networkpodx", false},
		{"pkg/networkpod", Module + "/pkg/networkpod/agent", false},
		{"github.com/vishvananda/...", "github.com/vishvananda/netlink/nl", true},
		{"github.com/opencontainers/runc/...", "github.com/opencontainers/runc", true},
		{"cmd/...", Module + "/cmd/kurmad", true},
	} {
		if got := Match(tt.pattern, tt.path); got != tt.want {
			t.Errorf("Match(%q, %q) = %v", tt.pattern, tt.path, got)
		}
	}
}
