package k8stest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The in-cluster path at which a network's plugin container finds its
// credentials, and where kurma-node keeps them on the node.
const (
	inClusterToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	credentialsDir = "/run/kurma/credentials"
)

// netGen is a generation as `kurmactl net ls -o json` shows it, with
// what this file reads.
type netGen struct {
	Network        string   `json:"network"`
	Generation     int      `json:"generation"`
	State          string   `json:"state"`
	Reason         string   `json:"reason"`
	Pid            int      `json:"pid"`
	Restarts       int      `json:"restarts"`
	Role           string   `json:"role"`
	NetworkPolicy  bool     `json:"network_policy"`
	PolicyNetworks []string `json:"policy_networks"`
}

// netGens are the newest generation of each network of the kurmad on n.
func netGens(t *testing.T, kurmactl string, n *Node) map[string]netGen {
	t.Helper()
	out, err := exec.Command(kurmactl, "--socket", n.Path(kurmadSocket), "net", "ls", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s: kurmactl net ls: %v", n.Name, err)
	}
	var gens []netGen
	if err := json.Unmarshal(out, &gens); err != nil {
		t.Fatalf("%s: kurmactl net ls: %v: %s", n.Name, err, out)
	}
	m := map[string]netGen{}
	for _, g := range gens {
		if cur, ok := m[g.Network]; !ok || g.Generation > cur.Generation {
			m[g.Network] = g
		}
	}
	return m
}

// jwtClaims are the claims of a service account token that this file
// reads.
type jwtClaims struct {
	Sub string `json:"sub"`
	Iat int64  `json:"iat"`
	Exp int64  `json:"exp"`
}

func claimsOf(token string) (jwtClaims, error) {
	var c jwtClaims
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return c, fmt.Errorf("not a JWT (%d parts)", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// containerToken is the token the process pid (a plugin container's
// main) finds at the in-cluster path.
func containerToken(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", pid, inClusterToken))
	return string(b), err
}

// flanneldOf is the PID of flanneld, the child of podnet's main pid.
func flanneldOf(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if strings.TrimSpace(string(comm)) != "flanneld" {
			continue
		}
		// stat: pid (comm) state ppid ...
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
			if f := strings.Fields(string(stat)[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				return p
			}
		}
	}
	return 0
}

// checkOwnCredentials: each network runs with credentials of its own,
// never kurmad's: podnet's flanneld holds a token of kurma-net-podnet,
// short-lived, the policy network's directory one of kurma-net-netpol;
// the policy network shows its role and what it polices, and the nodes
// are ready whatever it does (kurma-cni waits for the cluster network
// alone). A Network asking for credentials whose ServiceAccount does not
// exist does not start, on every node, its status naming the
// ServiceAccount. Rotation: with kurma-node renewing tokens every 20 s,
// the token in flanneld's container changes while flanneld runs on, the
// same process.
func checkOwnCredentials(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	kurmactl := need(t, filepath.Join(repo(t), "images/out/kurma-bin/kurmactl"), "run make image first")

	s.step("each network's own credentials: flanneld holds kurma-net-podnet's token, not kurmad's")
	for _, n := range c.Nodes {
		gens := netGens(t, kurmactl, n)
		podnet, netpol := gens["podnet"], gens["netpol"]
		if podnet.State != "running" || podnet.Pid == 0 || !podnet.NetworkPolicy {
			t.Fatalf("%s: podnet %+v, want running, opted in to policy", n.Name, podnet)
		}
		if netpol.Role != "policy" || !slices.Equal(netpol.PolicyNetworks, []string{"podnet"}) {
			t.Errorf("%s: netpol %+v, want the policy network over podnet", n.Name, netpol)
		}
		// This branch ships no netpol image yet: the network fails to
		// fetch it, and nothing else waits for it.
		t.Logf("%s: netpol is %s (%s)", n.Name, netpol.State, netpol.Reason)
		tok, err := containerToken(podnet.Pid)
		if err != nil {
			t.Fatalf("%s: podnet's container: %v", n.Name, err)
		}
		cl, err := claimsOf(tok)
		if err != nil {
			t.Fatalf("%s: podnet's token: %v", n.Name, err)
		}
		if cl.Sub != "system:serviceaccount:kurma-system:kurma-net-podnet" {
			t.Errorf("%s: podnet's container holds a token of %q, want kurma-net-podnet's", n.Name, cl.Sub)
		}
		if life := cl.Exp - cl.Iat; life <= 0 || life > 3700 {
			t.Errorf("%s: podnet's token lives %d s, want an hour", n.Name, life)
		}
		b, err := os.ReadFile(n.Path(filepath.Join(credentialsDir, "netpol", "token")))
		if err != nil {
			t.Fatalf("%s: netpol's credentials: %v", n.Name, err)
		}
		if cl, err := claimsOf(string(b)); err != nil || cl.Sub != "system:serviceaccount:kurma-system:kurma-net-netpol" {
			t.Errorf("%s: netpol's token is of %q (%v), want kurma-net-netpol's", n.Name, cl.Sub, err)
		}
	}

	s.step("a Network asking for credentials without its ServiceAccount fails on every node, naming it")
	applyYAML(t, c, `apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: ktcreds}
spec:
  image: file:///opt/kurma/images/cni-netplugin.aci
  kubernetesCredentials: true
  config: {cniVersion: "1.0.0", type: loopback}
`)
	waitFor(t, 2*time.Minute, "ktcreds failed on every node, naming its ServiceAccount", func() error {
		var o networkObject
		if err := c.KubectlJSON(ctx, &o, "get", "networks.kurma.dev", "ktcreds"); err != nil {
			return err
		}
		failed := 0
		for _, e := range o.Status.Nodes {
			if e.State != "failed" || !strings.Contains(e.Reason, "ServiceAccount kurma-net-ktcreds") {
				return fmt.Errorf("%s: %s (%s)", e.Node, e.State, e.Reason)
			}
			failed++
		}
		if failed != len(c.Nodes) {
			return fmt.Errorf("%d of %d nodes report", failed, len(c.Nodes))
		}
		return nil
	})
	for _, n := range c.Nodes {
		// kurma-node may not ask for its tokens (403: not in its Role's
		// resourceNames), nor is there a ServiceAccount.
		if g := netGens(t, kurmactl, n)["ktcreds"]; g.State != "failed" || !strings.Contains(g.Reason, "kurma-net-ktcreds") || !strings.Contains(g.Reason, "TokenRequest") {
			t.Errorf("%s: kurmactl net ls: ktcreds %+v, want failed naming kurma-net-ktcreds and why", n.Name, g)
		}
	}
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "ktcreds", "--wait=true"); err != nil {
		t.Fatal(err)
	}

	s.step("tokens renewed every 20 s (kurma-node --token-refresh): flanneld's changes, flanneld runs on")
	patch := `[{"op": "add", "path": "/spec/template/spec/containers/0/command/-", "value": "--token-refresh=20s"}]`
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "patch", "ds/kurmad", "--type=json", "-p", patch); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "-n", "kurma-system", "rollout", "status", "ds/kurmad", "--timeout=5m"); err != nil {
		t.Fatal(err)
	}
	// The new kurma pods started podnet anew (a stopping kurmad stops
	// its plugin containers): from here on nothing restarts it.
	pods := kurmadPodsByNode(t, c)
	for _, n := range c.Nodes {
		var old netGen
		waitFor(t, 2*time.Minute, n.Name+": podnet running under the new kurma pod", func() error {
			old = netGens(t, kurmactl, n)["podnet"]
			if old.State != "running" || old.Pid == 0 || flanneldOf(old.Pid) == 0 {
				return fmt.Errorf("podnet %+v", old)
			}
			return nil
		})
		flanneld := flanneldOf(old.Pid)
		first, err := containerToken(old.Pid)
		if err != nil {
			t.Fatalf("%s: podnet's container: %v", n.Name, err)
		}
		firstClaims, _ := claimsOf(first)
		var renewed jwtClaims
		waitFor(t, time.Minute, n.Name+": a renewed token in flanneld's container", func() error {
			tok, err := containerToken(old.Pid)
			if err != nil {
				return err
			}
			if tok == first {
				return fmt.Errorf("the token issued at %d", firstClaims.Iat)
			}
			renewed, err = claimsOf(tok)
			if err != nil || renewed.Sub != "system:serviceaccount:kurma-system:kurma-net-podnet" || renewed.Iat <= firstClaims.Iat {
				return fmt.Errorf("a token of %q issued at %d (%v)", renewed.Sub, renewed.Iat, err)
			}
			return nil
		})
		now := netGens(t, kurmactl, n)["podnet"]
		if now.Pid != old.Pid || now.Generation != old.Generation || now.Restarts != old.Restarts || flanneldOf(now.Pid) != flanneld {
			t.Errorf("%s: podnet %+v (flanneld %d), was %+v (flanneld %d): the renewal restarted the plugin", n.Name, now, flanneldOf(now.Pid), old, flanneld)
		}
		if p := kurmadPodsByNode(t, c)[n.Name]; p != pods[n.Name] {
			t.Errorf("%s: kurma's pod changed (%s, was %s) while the token was renewed", n.Name, p, pods[n.Name])
		}
		t.Logf("%s: flanneld (pid %d) runs on with a token issued %d s after the one before", n.Name, flanneld, renewed.Iat-firstClaims.Iat)
	}
}
