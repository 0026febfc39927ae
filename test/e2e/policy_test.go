package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/kurmacni"
)

// policyImage writes a third-party image acting as a policy network: its
// main executable (hosttool's recordmain) writes the config it gets on
// stdin into its network's state dir and runs; its add, del, check and gc
// record that they ran, and fail; its status passes.
func policyImage(t *testing.T) string {
	t.Helper()
	tool := testutil.BuildStatic(t, "./internal/testplugins/hosttool")
	img := filepath.Join(t.TempDir(), "netpol.aci")
	files := map[string]string{"/bin/recordmain": tool, "/opt/network/status": tool}
	for _, verb := range []string{"add", "del", "check", "gc"} {
		files["/opt/network/"+verb] = tool
	}
	testutil.WriteACI(t, img, "kurma.dev/test/netpol", []string{"/bin/recordmain"}, files)
	return img
}

// policyNets are rtnet (opted in to policy when rtnetPolicy), rtnet2
// (when rtnet2Policy) and netpol, the policy network, from image.
func policyNets(image string, rtnetPolicy, rtnet2Policy bool) []netDef {
	bridge := func(name, br, subnet string, policy bool) netDef {
		n := netDef{Name: name, Conf: map[string]any{"cniVersion": "1.0.0", "type": "bridge", "bridge": br, "isGateway": true,
			"ipam": map[string]any{"type": "host-local", "subnet": subnet}}}
		if policy {
			n.Conf["network_policy"] = true
		}
		return n
	}
	return []netDef{
		bridge(rtNetwork, rtBridge, rtSubnet, rtnetPolicy),
		{Name: "netpol", Image: "file://" + image, Conf: map[string]any{"role": "policy", "cluster_network": rtNetwork}},
		bridge(rt2Network, rt2Bridge, rt2Subnet, rtnet2Policy),
	}
}

// TestPolicyNetwork: a network of role "policy" runs as a generation of
// its own (fetched, started, status probed) whose main executable gets
// the networks that opted in as "policy_networks", with its other keys
// as written and none of kurma's; pods never attach to it: a create
// naming it is refused at once with 400, kurma-cni naming it (as the
// conflist's network or in the kurma.dev/networks annotation) fails with
// CNI code 7, and its add, del, check and gc never run. Turning
// network_policy off on one network and on on another keeps both their
// containers and starts a new generation of the policy network only,
// with the new list.
func TestPolicyNetwork(t *testing.T) {
	e := newEnv(t)
	image := policyImage(t)
	cniBin := testutil.Build(t, testutil.BuildOptions{}, "./cmd/kurma-cni")
	t.Cleanup(func() { testutil.DeleteBridges([]string{rtBridge, rt2Bridge}, rtLinkPrefix) })
	e.writeConfig(policyNets(image, true, false), nil)
	e.networks = append(e.networks, "netpol")
	e.start()
	ctx := context.Background()
	netpolDir := filepath.Join(e.StateDir, "networks", "netpol")

	stdin := waitMainStdin(t, netpolDir, "")
	if want := `{"cluster_network":"rtnet","name":"netpol","policy_networks":["rtnet"]}`; stdin != want {
		t.Errorf("netpol's main got %s on stdin, want %s", stdin, want)
	}
	gens := networksByName(t, e)
	if g := gens["netpol"]; g.Role != api.RolePolicy || !slices.Equal(g.PolicyNetworks, []string{rtNetwork}) || g.State != api.StateRunning {
		t.Errorf("netpol in GET /v1/networks: %+v, want a running policy network policing rtnet", g)
	}
	if g := gens[rtNetwork]; g.Role != api.RoleAttach || !g.NetworkPolicy {
		t.Errorf("rtnet in GET /v1/networks: %+v, want attach, network_policy", g)
	}
	if g := gens[rt2Network]; g.NetworkPolicy {
		t.Errorf("rtnet2 in GET /v1/networks: %+v, did not opt in", g)
	}
	out := e.mustCtl("net", "ls")
	for _, row := range []string{`(?m)^rtnet +1 +running +- +attach +by netpol `, `(?m)^netpol +1 +running +- +policy +rtnet `, `(?m)^rtnet2 +1 +running +- +attach +- `} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("net ls has no row matching %s:\n%s", row, out)
		}
	}

	// The API refuses a pod naming it, at once, with 400.
	const refusal = `network "netpol" enforces policy (role "policy"); pods do not attach to it`
	for _, nets := range [][]string{{"netpol"}, {rtNetwork, "netpol"}} {
		_, err := e.Client.CreatePod(ctx, api.CreatePodRequest{Networks: nets})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, refusal) {
			t.Errorf("create on %v: %v, want 400 bad_request saying %s", nets, err, refusal)
		}
	}
	if _, stderr, err := e.ctl("pod", "create", "--net", "netpol"); err == nil || !strings.Contains(stderr, refusal) {
		t.Errorf("kurmactl pod create --net netpol: %v, %s", err, stderr)
	}

	// kurma-cni naming it: the conflist's network, or in the annotation.
	cni := libcni.NewCNIConfigWithCacheDir([]string{cniBin}, t.TempDir(), nil)
	conflist := func(network string) *libcni.NetworkConfigList {
		b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "ktpolicy", "plugins": []map[string]any{{
			"type": "kurma-cni", "network": network, "socket": e.Socket,
			"capabilities": map[string]bool{kurmacni.PodAnnotationsCapability: true}}}})
		list, err := libcni.ConfListFromBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	for i, tc := range []struct {
		network    string
		annotation string
	}{{"netpol", ""}, {rtNetwork, "netpol"}, {rtNetwork, rt2Network + ",netpol"}} {
		ns := runtimeNetns(t, fmt.Sprintf("policy%d", i))
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("policy%d", i), NetNS: ns, IfName: "eth0"}
		if tc.annotation != "" {
			rt.CapabilityArgs = podAnnotations(kurmacni.NetworksAnnotation, tc.annotation)
		}
		_, err := cni.AddNetworkList(ctx, conflist(tc.network), rt)
		if code, msg := cniCode(err); code != types.ErrInvalidNetworkConfig || !strings.Contains(msg, refusal) {
			t.Errorf("ADD with network %s, annotation %q: %v (code %d), want code 7 saying %s", tc.network, tc.annotation, err, code, refusal)
		}
		checkRuntimeNetns(t, ns)
		if err := cni.DelNetworkList(ctx, conflist(tc.network), rt); err != nil {
			t.Errorf("DEL after the refused ADD: %v", err)
		}
	}
	if pods := e.listPods(); len(pods) != 0 {
		t.Errorf("kurmad holds %d pods after the refusals", len(pods))
	}

	// Pods of the networks it polices come and go, and kurmad's gc runs:
	// nothing is ever called on netpol but its status.
	p := e.createPod("--net", rtNetwork, "--net", rt2Network)
	e.mustCtl("pod", "rm", p.ID)
	e.stop()
	e.start() // boot's reconcile runs every network's gc
	if b, err := os.ReadFile(filepath.Join(netpolDir, "calls")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kurmad called the policy network's plugin: %q (%v)", b, err)
	}

	// rtnet opts out, rtnet2 in: the same containers for both, a new
	// generation of netpol with the new list.
	gens = networksByName(t, e)
	rtnetPid, rtnet2Pid, netpolGen := gens[rtNetwork].Pid, gens[rt2Network].Pid, gens["netpol"].Generation
	e.writeConfig(policyNets(image, false, true), nil)
	e.networks = append(e.networks, "netpol")
	var res api.ReloadResult
	if err := json.Unmarshal([]byte(e.mustCtl("reload", "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Updated)
	if !slices.Equal(res.Updated, []string{rtNetwork, rt2Network}) || !slices.Equal(res.Replaced, []string{"netpol"}) {
		t.Errorf("reload: %+v, want rtnet and rtnet2 updated in place, netpol replaced", res)
	}
	stdin = waitMainStdin(t, netpolDir, stdin)
	if want := `{"cluster_network":"rtnet","name":"netpol","policy_networks":["rtnet2"]}`; stdin != want {
		t.Errorf("netpol's new generation got %s, want %s", stdin, want)
	}
	testutil.WaitFor(t, 30*time.Second, "netpol's new generation to serve and the old one to go", func() error {
		var list []api.Generation
		for _, g := range e.networksList(t) {
			if g.Network == "netpol" {
				list = append(list, g)
			}
		}
		if len(list) != 1 || list[0].Generation != netpolGen+1 || list[0].State != api.StateRunning ||
			!slices.Equal(list[0].PolicyNetworks, []string{rt2Network}) {
			return fmt.Errorf("netpol's generations: %+v", list)
		}
		return nil
	})
	gens = networksByName(t, e)
	if g := gens[rtNetwork]; g.Generation != 1 || g.Pid != rtnetPid || g.NetworkPolicy {
		t.Errorf("rtnet after opting out: %+v, want generation 1, pid %d, no network_policy", g, rtnetPid)
	}
	if g := gens[rt2Network]; g.Generation != 1 || g.Pid != rtnet2Pid || !g.NetworkPolicy {
		t.Errorf("rtnet2 after opting in: %+v, want generation 1, pid %d, network_policy", g, rtnet2Pid)
	}
}

// waitMainStdin waits until the policy image's main wrote a config other
// than prev into dir, and returns it.
func waitMainStdin(t *testing.T, dir, prev string) string {
	t.Helper()
	var got string
	testutil.WaitFor(t, 30*time.Second, "the policy network's main to record its config", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "main-stdin"))
		if err != nil {
			return err
		}
		if got = string(b); got == prev {
			return errors.New("the config of the previous generation")
		}
		return nil
	})
	return got
}

// networksList is GET /v1/networks.
func (e *env) networksList(t *testing.T) []api.Generation {
	t.Helper()
	gens, err := e.Client.Networks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gens
}

// networksByName is the newest generation of each network.
func networksByName(t *testing.T, e *env) map[string]api.Generation {
	t.Helper()
	out := map[string]api.Generation{}
	for _, g := range e.networksList(t) {
		if cur, ok := out[g.Network]; !ok || g.Generation > cur.Generation {
			out[g.Network] = g
		}
	}
	return out
}
