package cniwrap_test

import (
	"fmt"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// TestRuntimeConfigReachesPlugins: the capability arguments kurmad places
// as runtimeConfig at the top of the config reach, through libcni's
// CapabilityArgs, each plugin that declares the capability: host-local
// (inside bridge) the ips, tuning the mac; and del with the same config
// releases the address.
func TestRuntimeConfigReachesPlugins(t *testing.T) {
	testutil.RequireRoot(t)
	f := newFixture(t)
	ns := f.netns("rc")
	const uuid = "6d1f9a3c-0000-4000-8000-0000000009aa"
	const ip, mac = "10.201.9.9", "c2:aa:bb:cc:dd:01"
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"ktwrc","plugins":[
		{"type":"bridge","bridge":%q,"isGateway":true,"capabilities":{"ips":true},"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}},
		{"type":"tuning","capabilities":{"mac":true}}],
		"runtimeConfig":{"ips":[%q],"mac":%q}}`, testBridge, testSubnet, f.ipamDir, ip+"/16", mac)
	res := parseResult(t, f.mustRun("add", conf, ns, uuid, "eth0").stdout, "1.0.0")
	if got := res.IPs[0].Address.IP.String(); got != ip {
		t.Errorf("IP %s, want the runtimeConfig's %s", got, ip)
	}
	if got := testutil.LinkMAC(t, ns, "eth0"); got != mac {
		t.Errorf("eth0's MAC %s, want the runtimeConfig's %s", got, mac)
	}
	f.mustRun("del", conf, ns, uuid, "eth0")
	if f.leased("ktwrc", res.IPs[0].Address.IP) {
		t.Errorf("%s still leased after del", ip)
	}
}
