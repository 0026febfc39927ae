package cniwrap_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/cniwrap"
)

// This file's flannel subnets: the cluster 10.202.0.0/16 and
// fd00:202::/56, this "node" 10.202.3.0/24 and fd00:202:0:3::/64.
const flannelSubnetEnv = `FLANNEL_NETWORK=10.202.0.0/16
FLANNEL_SUBNET=10.202.3.1/24
FLANNEL_IPV6_NETWORK=fd00:202::/56
FLANNEL_IPV6_SUBNET=fd00:202:0:3::1/64
FLANNEL_MTU=1400
FLANNEL_IPMASQ=true
`

// flannelFixture is a fixture whose wrapper finds flanneld's files in a
// dir of the test's own (KURMA_FLANNEL_DIR).
func flannelFixture(t *testing.T) (*fixture, string) {
	f := newFixture(t)
	dir := filepath.Join(t.TempDir(), "flannel")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f.env = append(f.env, cniwrap.EnvFlannelDir+"="+dir)
	return f, dir
}

// flannelConf is a network with a "flannel" object and a flannel plugin
// delegating to bridge kt-wrap0, with portmap behind it.
func (f *fixture) flannelConf(name string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,
		"flannel":{"network":"10.202.0.0/16,fd00:202::/56","backend":{"type":"vxlan"}},
		"plugins":[
		  {"type":"flannel","delegate":{"bridge":%q,"isDefaultGateway":true},"ipam":{"dataDir":%q}},
		  {"type":"portmap","backend":"nftables","capabilities":{"portMappings":true}}]}`, name, testBridge, f.ipamDir)
}

// TestFlannelAddDel: a plugin of type flannel attaches a pod with bridge
// and host-local on the node's flannel subnets, both families, at
// flanneld's MTU, routes to the cluster networks and no masquerade
// (flanneld masquerades); without subnet.env an add fails as "try again
// later" and status says the plugin cannot serve adds (CNI 50), while a
// del still releases the pod from the config its add was cached with.
func TestFlannelAddDel(t *testing.T) {
	testutil.RequireRoot(t)
	f, dir := flannelFixture(t)
	conf := f.flannelConf("ktwflan")
	ns := f.netns("flan")
	uuid := "6d1f9a3c-0000-4000-8000-00000000f1a0"

	r := f.run("add", conf, ns, uuid, "eth0")
	var e cniwrap.ErrorObject
	if r.code == 0 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code != 11 || !strings.Contains(r.stderr, "flannel is not ready") {
		t.Fatalf("add before flanneld wrote subnet.env: exit %d stdout %s stderr %s, want CNI error 11 saying flannel is not ready", r.code, r.stdout, r.stderr)
	}
	if r := f.run("status", conf); r.code == 0 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code != 50 {
		t.Errorf("status before subnet.env: exit %d stdout %s, want CNI error 50", r.code, r.stdout)
	}
	if err := os.WriteFile(filepath.Join(dir, cniwrap.SubnetFile), []byte(flannelSubnetEnv), 0o644); err != nil {
		t.Fatal(err)
	}
	f.mustRun("status", conf)

	res := parseResult(t, f.mustRun("add", conf, ns, uuid, "eth0").stdout, "1.0.0")
	var v4, v6 net.IP
	for _, ip := range res.IPs {
		switch {
		case ip.Address.IP.To4() != nil:
			v4 = ip.Address.IP
		default:
			v6 = ip.Address.IP
		}
	}
	if _, sn, _ := net.ParseCIDR("10.202.3.0/24"); v4 == nil || !sn.Contains(v4) {
		t.Errorf("IPv4 %v, want one in the node's subnet 10.202.3.0/24", v4)
	}
	if _, sn, _ := net.ParseCIDR("fd00:202:0:3::/64"); v6 == nil || !sn.Contains(v6) {
		t.Errorf("IPv6 %v, want one in the node's subnet fd00:202:0:3::/64", v6)
	}
	if !f.leased("ktwflan", v4) || !f.leased("ktwflan", v6) {
		t.Errorf("host-local holds no lease for %v and %v", v4, v6)
	}
	mtu, routes := podLink(t, ns, "eth0")
	if mtu != 1400 {
		t.Errorf("eth0's MTU is %d, want flanneld's 1400", mtu)
	}
	for _, want := range []string{"10.202.0.0/16", "fd00:202::/56", "0.0.0.0/0"} {
		if !strings.Contains(routes, want) {
			t.Errorf("the pod has no route to %s: %s", want, routes)
		}
	}
	if out, err := exec.Command("nft", "list", "ruleset").Output(); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(out), "10.202.3.0/24") {
		t.Errorf("a masquerade rule for the pod subnet exists (ipMasq must be off: flanneld masquerades):\n%s", out)
	}

	// A second pod, which kurmad will have forgotten by the gc below.
	ns2, uuid2 := f.netns("flan2"), "6d1f9a3c-0000-4000-8000-00000000f1a2"
	stale := parseResult(t, f.mustRun("add", conf, ns2, uuid2, "eth0").stdout, "1.0.0").IPs[0].Address.IP

	// flanneld gone (its subnet.env with it): del, check and gc still
	// work, each attachment with the config its add was cached with.
	if err := os.Remove(filepath.Join(dir, cniwrap.SubnetFile)); err != nil {
		t.Fatal(err)
	}
	f.mustRun("check", conf, ns, uuid, "eth0")
	f.mustRun("del", conf, ns, uuid, "eth0")
	if testutil.IPv4In(t, ns, "eth0") != nil {
		t.Error("eth0 still exists after del")
	}
	if f.leased("ktwflan", v4) || f.leased("ktwflan", v6) {
		t.Error("the leases were not released by del")
	}
	f.mustRun("gc", validAttachments(t, conf))
	if f.leased("ktwflan", stale) || testutil.IPv4In(t, ns2, "eth0") != nil {
		t.Error("gc without subnet.env left the stale pod's lease or interface")
	}
}

// podLink returns the MTU of link in the netns at path and its routes, as
// text.
func podLink(t *testing.T, path, link string) (int, string) {
	t.Helper()
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	l, err := nl.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := nl.RouteList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range routes {
		if r.Dst == nil {
			if r.Family == netlink.FAMILY_V4 {
				b.WriteString("0.0.0.0/0 ")
			} else {
				b.WriteString("::/0 ")
			}
			continue
		}
		b.WriteString(r.Dst.String() + " ")
	}
	return l.Attrs().MTU, b.String()
}

// TestExpandFlannel: the delegate's own keys win over what subnet.env
// says; an IPAM's routes are kept beside the cluster's.
func TestExpandFlannel(t *testing.T) {
	list, err := cniwrap.ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[
		{"type":"flannel","delegate":{"type":"ptp","mtu":1300,"ipMasq":true},"ipam":{"routes":[{"dst":"192.0.2.0/24"}]}},
		{"type":"bandwidth"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	env := &cniwrap.SubnetEnv{MTU: 1450, IPMasq: true}
	for _, s := range []string{"10.202.0.0/16"} {
		env.Networks = append(env.Networks, mustPrefix(t, s))
	}
	env.Subnets = append(env.Subnets, mustPrefix(t, "10.202.9.0/24"))
	out, err := cniwrap.ExpandFlannel(list, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Plugins) != 2 || out.Plugins[0].Network.Type != "ptp" || out.Plugins[1].Network.Type != "bandwidth" {
		t.Fatalf("plugins %s", out.Bytes)
	}
	var d map[string]any
	if err := json.Unmarshal(out.Plugins[0].Bytes, &d); err != nil {
		t.Fatal(err)
	}
	ipam, _ := json.Marshal(d["ipam"])
	if d["mtu"] != 1300.0 || d["ipMasq"] != true || d["isGateway"] != nil ||
		string(ipam) != `{"ranges":[[{"subnet":"10.202.9.0/24"}]],"routes":[{"dst":"192.0.2.0/24"},{"dst":"10.202.0.0/16"}],"type":"host-local"}` {
		t.Errorf("delegate %s", out.Plugins[0].Bytes)
	}
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
