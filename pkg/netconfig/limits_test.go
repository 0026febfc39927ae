package netconfig

import (
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// limits: sizes as bytes or with a binary suffix, counts as numbers, 0
// lifting a bound, absent keys left to the defaults; every problem named
// by its path, unknown keys with a suggestion; neither limits nor
// main_sees_pods reaches the plugin.
func TestLimits(t *testing.T) {
	c, err := Parse([]byte(`{"pod_networks": [{"name": "a", "image": "file:///a.aci", "type": "bridge",
		"limits": {"memory": "512Mi", "pids": 100, "call_memory": 67108864, "state_dir": 0, "tmpfs": "1Gi"},
		"main_sees_pods": true}]}`), "/etc/kurma")
	if err != nil {
		t.Fatal(err)
	}
	n := c.Networks[0]
	want := gendef.Limits{Memory: 512 << 20, Pids: 100, CallMemory: 64 << 20, StateDir: gendef.NoLimit, Tmpfs: 1 << 30}
	if n.Limits != want || !n.MainSeesPods {
		t.Errorf("limits %+v, main_sees_pods %v; want %+v, true", n.Limits, n.MainSeesPods, want)
	}
	conf, err := n.PluginConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(conf), "limits") || strings.Contains(string(conf), "main_sees_pods") {
		t.Errorf("the plugin gets kurma's keys: %s", conf)
	}

	_, err = Parse([]byte(`{"pod_networks": [{"name": "a", "image": "file:///a.aci",
		"limits": {"memroy": "1Gi", "pids": "many", "tmpfs": "12Q", "state_dir": 1024, "call_pids": -1},
		"main_sees_pods": "yes"}]}`), "/etc/kurma")
	for _, w := range []wantProblem{
		{"pod_networks[0].limits.memroy", `did you mean "memory"?`},
		{"pod_networks[0].limits.pids", "expected a whole number"},
		{"pod_networks[0].limits.tmpfs", `"12Q" is not a size`},
		{"pod_networks[0].limits.state_dir", "less than 1Mi"},
		{"pod_networks[0].limits.call_pids", "must not be negative"},
		{"pod_networks[0].main_sees_pods", "expected a boolean"},
	} {
		found := false
		for _, p := range problemsOf(t, err) {
			found = found || (p.Path == w.path && strings.Contains(p.Msg, w.msg))
		}
		if !found {
			t.Errorf("no problem %s: %s in\n%v", w.path, w.msg, err)
		}
	}
}

// TestTooFewTasks: a task limit the plugin container cannot start or
// call under is refused at load, saying the least it takes, rather than
// failing later as "exec agent exit status 2" or an add that cannot fork.
func TestTooFewTasks(t *testing.T) {
	_, err := Parse([]byte(`{"pod_networks": [{"name": "a", "image": "file:///a.aci", "limits": {"pids": 24, "call_pids": 8}}]}`), "/etc/kurma")
	ps := problemsOf(t, err)
	if len(ps) != 2 || ps[0].Path != "pod_networks[0].limits.pids" || !strings.Contains(ps[0].Msg, "24 is too few") || !strings.Contains(ps[0].Msg, "at least 64") ||
		ps[1].Path != "pod_networks[0].limits.call_pids" || !strings.Contains(ps[1].Msg, "at least 32") {
		t.Errorf("problems %v", ps)
	}
	if _, err := Parse([]byte(`{"pod_networks": [{"name": "a", "image": "file:///a.aci", "limits": {"pids": 64, "call_pids": 0}}]}`), "/etc/kurma"); err != nil {
		t.Errorf("the least, and no limit: %v", err)
	}
}
