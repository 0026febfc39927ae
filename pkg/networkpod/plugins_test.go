package networkpod

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// Containment must not break real plugins. With the default containment
// (no allow_capabilities, no allow_syscalls), the cni-netplugin image runs
// ptp with host-local, portmap over nftables (no iptables in the image),
// tuning (a net sysctl and a MAC address) and bandwidth as one chain, and
// macvlan on a host link; add configures the pod's netns and the host as
// each plugin does, del undoes it. (bridge with host-local, portmap,
// tuning and bandwidth run under kurmad in test/e2e's runtime tests.)
func TestContainedReferencePlugins(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft is needed (make deps): %v", err)
	}
	p := newTestHost(t, nil)
	img := netplugImage(t)

	// macvlan's master: one end of a veth pair on the host (this kernel has
	// no dummy links).
	master := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kt-mvm0"}, PeerName: "kt-mvm1"}
	if err := netlink.LinkAdd(master); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("kt-mvm0"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}

	chain := []byte(`{"cniVersion":"1.0.0","name":"ktnchain","plugins":[` +
		`{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","subnet":"10.203.0.0/24"}},` +
		`{"type":"portmap","backend":"nftables","capabilities":{"portMappings":true}},` +
		`{"type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1"},"mac":"0a:58:0a:cb:00:63"},` +
		`{"type":"bandwidth","ingressRate":1000000,"ingressBurst":100000,"egressRate":1000000,"egressBurst":100000}` +
		`],"runtimeConfig":{"portMappings":[{"hostPort":18099,"containerPort":80,"protocol":"tcp"}]}}`)
	mv := []byte(`{"cniVersion":"1.0.0","name":"ktnmv","type":"macvlan","master":"kt-mvm0","mode":"bridge",` +
		`"ipam":{"type":"host-local","subnet":"10.204.0.0/24"}}`)
	startGenerations(t, p,
		Spec{Network: "ktnchain", Image: img, Config: chain},
		Spec{Network: "ktnmv", Image: img, Config: mv})
	ctx := context.Background()
	ns := newNetns(t, p.NetnsDir(), "ktn-refs")
	const pod = "ktn-refs-pod"

	out, stderr, err := p.Exec(ctx, testCall("ktnchain", 0, "/opt/network/add", []string{ns, pod, "eth0"}, chain))
	if err != nil {
		t.Fatalf("chain add: %v\nstderr: %s", err, stderr)
	}
	t.Cleanup(func() {
		_, _, _ = p.Exec(ctx, testCall("ktnchain", 0, "/opt/network/del", []string{ns, pod, "eth0"}, chain))
	})
	var res struct {
		Interfaces []struct{ Name, Sandbox string } `json:"interfaces"`
		IPs        []struct{ Address string }       `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("chain add result %s: %v", out, err)
	}
	ip, _, _ := net.ParseCIDR(res.IPs[0].Address)
	if addrs := testutil.IPv4In(t, ns, "eth0"); !testutil.HasIP(addrs, ip) {
		t.Errorf("ptp: eth0 has %v, want %s", addrs, ip)
	}
	if mac := testutil.LinkMAC(t, ns, "eth0"); mac != "0a:58:0a:cb:00:63" {
		t.Errorf("tuning: eth0's MAC is %s", mac)
	}
	if v := sysctlIn(t, ns, "net/ipv4/conf/eth0/arp_notify"); v != "1" {
		t.Errorf("tuning: arp_notify in the pod is %q", v)
	}
	host := ""
	for _, i := range res.Interfaces {
		if i.Sandbox == "" {
			host = i.Name
		}
	}
	if host == "" {
		t.Fatalf("no host-side interface in %s", out)
	}
	if !hasTBF(t, host) {
		t.Errorf("bandwidth: no tbf qdisc on the host's %s", host)
	}
	if rules, _ := exec.Command("nft", "list", "ruleset").Output(); !strings.Contains(string(rules), "18099") {
		t.Errorf("portmap: no nftables rule for host port 18099")
	}

	out, stderr, err = p.Exec(ctx, testCall("ktnmv", 0, "/opt/network/add", []string{ns, pod, "mv0"}, mv))
	if err != nil {
		t.Fatalf("macvlan add: %v\nstderr: %s", err, stderr)
	}
	res.IPs = nil
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("macvlan add result %s: %v", out, err)
	}
	ip, _, _ = net.ParseCIDR(res.IPs[0].Address)
	if addrs := testutil.IPv4In(t, ns, "mv0"); !testutil.HasIP(addrs, ip) {
		t.Errorf("macvlan: mv0 has %v, want %s", addrs, ip)
	}

	for _, c := range []struct {
		name, ifname string
		conf         []byte
	}{{"ktnmv", "mv0", mv}, {"ktnchain", "eth0", chain}} {
		if _, stderr, err := p.Exec(ctx, testCall(c.name, 0, "/opt/network/del", []string{ns, pod, c.ifname}, c.conf)); err != nil {
			t.Errorf("%s del: %v\nstderr: %s", c.name, err, stderr)
		}
		if addrs := testutil.IPv4In(t, ns, c.ifname); addrs != nil {
			t.Errorf("%s: %s still there after del: %v", c.name, c.ifname, addrs)
		}
	}
	if _, err := netlink.LinkByName(host); err == nil {
		t.Errorf("ptp: host side %s still there after del", host)
	}
	if rules, _ := exec.Command("nft", "list", "ruleset").Output(); strings.Contains(string(rules), "18099") {
		t.Errorf("portmap: the rule for host port 18099 is still there after del")
	}
}

// sysctlIn reads /proc/sys/<key> in the network namespace at path.
func sysctlIn(t *testing.T, path, key string) string {
	t.Helper()
	var v []byte
	err := netnsfile.Do(path, func() error {
		var err error
		v, err = os.ReadFile(filepath.Join("/proc/sys", key))
		return err
	})
	if err != nil {
		t.Fatalf("sysctl %s in %s: %v", key, path, err)
	}
	return strings.TrimSpace(string(v))
}

// hasTBF tells whether the host's link has a tbf qdisc (the bandwidth
// plugin's shaping).
func hasTBF(t *testing.T, link string) bool {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatalf("host link %s: %v", link, err)
	}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Type() == "tbf" {
			return true
		}
	}
	return false
}
