package k8snode

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// inNetns runs fn on a thread in the network namespace at path.
func inNetns(t *testing.T, path string, fn func()) {
	t.Helper()
	if err := netnsfile.Do(path, func() error { fn(); return nil }); err != nil {
		t.Error(err)
	}
}

// ipIn is `ip ARGS` in the network namespace at path, one line per route
// or rule.
func ipIn(t *testing.T, path string, args ...string) []string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + path, "ip"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestKernelRouter: in a node's network namespace, the other nodes'
// blocks are routed via their addresses (proto 107) and each subnet gets
// its three rules; a second Route with a block moved replaces its route
// and leaves the rest; a Route without the network removes its routes and
// rules and nothing else of the node's.
func TestKernelRouter(t *testing.T) {
	testutil.RequireRoot(t)
	path := testutil.NewNodeNetns(t, filepath.Join(t.TempDir(), "node"), testutil.NodeLink{
		Host: "ktspan0", HostAddrs: []string{"10.203.7.1/24", "fd00:203:7::1/64"},
		Name: "eth0", Addrs: []string{"10.203.7.2/24", "fd00:203:7::2/64"}})
	v4 := SpanRoutes{Network: "spread", Subnet: netip.MustParsePrefix("10.77.0.0/16"), Blocks: []BlockRoute{
		{Block: netip.MustParsePrefix("10.77.1.0/24"), Via: netip.MustParseAddr("10.203.7.1")},
		{Block: netip.MustParsePrefix("10.77.2.0/24"), Via: netip.MustParseAddr("10.203.7.3")}}}
	v6 := SpanRoutes{Network: "spread6", Subnet: netip.MustParsePrefix("fd00:77::/48"), Blocks: []BlockRoute{
		{Block: netip.MustParsePrefix("fd00:77:0:1::/64"), Via: netip.MustParseAddr("fd00:203:7::1")}}}
	route := func(nets ...SpanRoutes) {
		t.Helper()
		var err error
		inNetns(t, path, func() { err = KernelRouter{}.Route(nets) })
		if err != nil {
			t.Fatal(err)
		}
	}
	rulesBefore := ipIn(t, path, "rule", "show")
	route(v4, v6)
	route(v4, v6) // again: nothing changes, nothing fails
	if got := ipIn(t, path, "route", "show", "proto", "107"); !slices.Equal(got, []string{
		"10.77.1.0/24 via 10.203.7.1 dev eth0", "10.77.2.0/24 via 10.203.7.3 dev eth0"}) {
		t.Errorf("IPv4 routes %q", got)
	}
	if got := ipIn(t, path, "-6", "route", "show", "proto", "107"); len(got) != 1 || !strings.HasPrefix(got[0], "fd00:77:0:1::/64 via fd00:203:7::1 dev eth0") {
		t.Errorf("IPv6 routes %q", got)
	}
	wantRules := []string{"32000: from 10.77.0.0/16 to 10.77.0.0/16 lookup main proto 107",
		"32001: from all to 10.77.0.0/16 iif lo lookup main proto 107", "32002: from all to 10.77.0.0/16 prohibit proto 107"}
	got := ipIn(t, path, "rule", "show")
	for _, w := range wantRules {
		if !slices.Contains(got, w) {
			t.Errorf("no rule %q in %q", w, got)
		}
	}
	if got6 := ipIn(t, path, "-6", "rule", "show"); !slices.ContainsFunc(got6, func(l string) bool { return strings.Contains(l, "to fd00:77::/48 prohibit") }) {
		t.Errorf("IPv6 rules %q", got6)
	}

	v4.Blocks[1].Via = netip.MustParseAddr("10.203.7.4")
	route(v4)
	if got := ipIn(t, path, "route", "show", "proto", "107"); !slices.Equal(got, []string{
		"10.77.1.0/24 via 10.203.7.1 dev eth0", "10.77.2.0/24 via 10.203.7.4 dev eth0"}) {
		t.Errorf("IPv4 routes after the move %q", got)
	}
	if got := ipIn(t, path, "-6", "route", "show", "proto", "107"); len(got) != 0 {
		t.Errorf("spread6's routes stay: %q", got)
	}
	route()
	if got := ipIn(t, path, "route", "show", "proto", "107"); len(got) != 0 {
		t.Errorf("routes left %q", got)
	}
	if got := ipIn(t, path, "rule", "show"); !slices.Equal(got, rulesBefore) {
		t.Errorf("rules %q, were %q", got, rulesBefore)
	}
}
