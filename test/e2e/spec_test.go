package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// legacyImage writes, into dir, a third-party plugin image: legacynet (see
// internal/testplugins/legacynet) as its main executable and its
// /opt/network/add and del, with no cni-wrapper in it. It returns its
// file:// URI.
func legacyImage(t *testing.T, dir string) string {
	t.Helper()
	prog := testutil.BuildStatic(t, "./internal/testplugins/legacynet")
	p := filepath.Join(dir, "legacynet.aci")
	testutil.WriteACI(t, p, "example.com/legacynet", []string{"/opt/network/main"}, map[string]string{
		"/opt/network/main": prog, "/opt/network/add": prog, "/opt/network/del": prog,
	})
	return "file://" + p
}

// attachment returns the pod's attachment to network, failing t without.
func attachment(t *testing.T, p *api.Pod, network string) api.Attachment {
	t.Helper()
	for _, a := range p.Attachments {
		if a.Network == network {
			return a
		}
	}
	t.Fatalf("pod %s has no attachment to %s: %+v", p.ID, network, p.Attachments)
	return api.Attachment{}
}

// TestThirdPartyImageWithoutCNIVersion: a Kurma-era image whose plugin
// refuses any cniVersion but 0.2.0 or none, configured without one, gets
// its config as written: its main executable accepts it, pods attach, its
// 0.2.0 result without cniVersion is read as such, and what it printed is
// kept byte for byte (the API's raw_result, kurmactl pod inspect --raw).
func TestThirdPartyImageWithoutCNIVersion(t *testing.T) {
	e := newEnv(t)
	legacy := netDef{Name: "legacy", Image: legacyImage(t, e.Dir), Conf: map[string]any{"address": "10.213.0.2/24"}}
	e.writeConfig([]netDef{legacy}, nil)
	e.networks = []string{"legacy"} // the one start waits for
	e.start()

	p := e.createPod("--net", "legacy")
	a := attachment(t, p, "legacy")
	if a.Interface != "eth0" {
		t.Errorf("interface %q, want eth0 (kurmad's first free ethN)", a.Interface)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(a.Result, &res); err != nil || res.CNIVersion != "1.1.0" || len(res.IPs) != 1 || res.IPs[0].Address != "10.213.0.2/24" {
		t.Errorf("result %s (%v), want 1.1.0 with the plugin's 10.213.0.2/24", a.Result, err)
	}
	if !testutil.HasIP(testutil.IPv4In(t, p.Netns, "eth0"), net.ParseIP("10.213.0.2")) {
		t.Errorf("eth0 in the pod lacks the plugin's address")
	}
	// What the plugin printed, as it printed it (see legacynet's rawResult).
	const raw = "{\n  \"ip4\" : { \"ip\" : \"10.213.0.2/24\" },\n  \"dns\" : {}\n}\n"
	if a.RawResult != raw || a.RawResultTruncated {
		t.Errorf("raw_result %q (truncated %v), want %q", a.RawResult, a.RawResultTruncated, raw)
	}
	for _, args := range [][]string{{"pod", "inspect", p.ID, "--raw"}, {"pod", "inspect", p.ID, "--raw", "--net", "legacy"}} {
		if out := e.mustCtl(args...); out != raw {
			t.Errorf("kurmactl %s printed %q, want the plugin's exact bytes %q", strings.Join(args, " "), out, raw)
		}
	}
	e.mustCtl("pod", "rm", p.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestInterfaceNamesAroundExistingLinks: a pod's netns where a link
// already exists that kurma did not name (prep's plugin leaves eth0 beside
// its own interface): a network without containerInterface gets eth1, a
// g{{random 4}} template a free name, both made by the bridge plugin under
// those names; a fixed eth0 fails with 409 naming the link, before its
// plugin runs, and the pod is rolled back.
func TestInterfaceNamesAroundExistingLinks(t *testing.T) {
	e := newEnv(t)
	prep := netDef{Name: "prep", Iface: "prep0", Conf: cnitestConf("ok")}
	prep.Conf["extraLinks"] = []string{"eth0"}
	auto := bridgeNet("auto", "kt-e2e0", "10.204.0.0/16", "", false)
	rnd := bridgeNet("rnd", "kt-e2e1", "10.205.0.0/16", "g{{random 4}}", false)
	fixed := netDef{Name: "fixed", Iface: "eth0", Conf: cnitestConf("fail")}
	e.writeConfig([]netDef{prep, auto, rnd, fixed}, nil)
	e.start()

	p := e.createPod("--net", "prep", "--net", "auto", "--net", "rnd")
	if a := attachment(t, p, "auto"); a.Interface != "eth1" || len(testutil.IPv4In(t, p.Netns, "eth1")) == 0 {
		t.Errorf("auto: interface %q; want eth1, the first ethN free in the netns, with the bridge plugin's address", a.Interface)
	}
	r := attachment(t, p, "rnd").Interface
	if !regexp.MustCompile(`^g[a-z0-9]{4}$`).MatchString(r) || len(testutil.IPv4In(t, p.Netns, r)) == 0 {
		t.Errorf("rnd: interface %q; want g + 4 random characters, made by the bridge plugin", r)
	}
	e.mustCtl("pod", "rm", p.ID)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.Client.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"prep", "fixed"}})
	var ae *api.Error
	const want = `network "fixed": interface name: pod_networks "fixed": interface "eth0" is taken: the pod's network namespace already has a link "eth0", which kurma did not name`
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != api.CodeConflict || !strings.Contains(ae.Message, want) {
		t.Errorf("create with a fixed eth0 = %v; want 409 conflict saying %s", err, want)
	}
	if strings.Contains(e.Log(), "cnitest: told to fail") {
		t.Error("fixed's plugin ran with a taken name")
	}
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestCNINetworkNames: networks named as CNI 1.0 allows run, attach and
// tear down through kurmad and kurmactl, their containers, directories and
// cgroups named after them (and their generation); a reference must spell a name exactly; and net
// with NET in one config stops kurmad at boot naming both entries.
func TestCNINetworkNames(t *testing.T) {
	e := newEnv(t)
	names := []string{"MyNet", "net.v1", "a_b-c"}
	e.writeConfig([]netDef{
		bridgeNet("MyNet", "kt-e2e0", "10.204.0.0/16", "", false),
		cnitestNet("net.v1", "ok"),
		bridgeNet("a_b-c", "kt-e2e1", "10.205.0.0/16", "", false),
	}, nil)
	e.start()
	cgroups := strings.Join(e.CgroupDirs(), "\n")
	for _, n := range names {
		// Its plugin state, and its generation 1's run dir, container and cgroup.
		for _, d := range []string{filepath.Join(e.StateDir, "networks", n), filepath.Join(e.RunDir, "networks", n+"+1"), filepath.Join(e.RunDir, "containers", "kurma-net-"+n+"+1")} {
			if _, err := os.Stat(d); err != nil {
				t.Errorf("network %s: %v", n, err)
			}
		}
		if !strings.Contains(cgroups, "/kurma-net-"+n+"+1\n") && !strings.HasSuffix(cgroups, "/kurma-net-"+n+"+1") {
			t.Errorf("no cgroup kurma-net-%s+1 among:\n%s", n, cgroups)
		}
	}

	p := e.createPod("--net", "MyNet", "--net", "net.v1", "--net", "a_b-c:IP=10.205.0.77")
	for i, n := range names {
		if a := attachment(t, p, n); a.Interface != fmt.Sprintf("eth%d", i) {
			t.Errorf("%s: interface %q, want eth%d", n, a.Interface, i)
		}
	}
	if ips := podIPs(t, p); ips["a_b-c"] != "10.205.0.77" || !strings.HasPrefix(ips["MyNet"], "10.204.") {
		t.Errorf("addresses %v", ips)
	}
	if out := e.mustCtl("pod", "inspect", p.ID); !strings.Contains(out, "MyNet") || !strings.Contains(out, "net.v1") || !strings.Contains(out, "a_b-c") {
		t.Errorf("pod inspect does not show the networks:\n%s", out)
	}
	if _, errOut, err := e.ctl("pod", "create", "--net", "mynet"); err == nil || !strings.Contains(errOut, `unknown network "mynet" (known networks: MyNet, net.v1, a_b-c)`) {
		t.Errorf("create on mynet: %v %s; want unknown network listing MyNet", err, errOut)
	}
	e.mustCtl("pod", "rm", p.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()

	e.writeConfig([]netDef{bridgeNet("net", "kt-e2e0", "10.204.0.0/16", "", false), bridgeNet("NET", "kt-e2e1", "10.205.0.0/16", "", false)}, nil)
	out, err := exec.Command(bin("kurmad"), "--config", e.Config, "--socket", e.Socket).CombinedOutput()
	const want = `pod_networks[1].name: "NET" and "net" (pod_networks[0]) differ only in case`
	if exitCode(err) != 2 || !strings.Contains(string(out), want) {
		t.Errorf("kurmad with net and NET: %v\n%s\nwant exit 2 and %s", err, out, want)
	}
}
