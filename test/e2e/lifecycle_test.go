package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// twoBridges is the usual config: a default bridge network "a" (eth{{num}})
// and a non-default bridge network "b" with a num+random template.
func twoBridges() []netDef {
	return []netDef{
		bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true),
		bridgeNet("b", "kt-e2e1", "10.205.0.0/16", "net{{num}}{{random 4}}", false),
	}
}

// linksIn returns the link names inside the netns at path.
func linksIn(t *testing.T, path string) []string {
	t.Helper()
	names, err := netnsfile.Links(path)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestPodLifecycle(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(twoBridges(), nil)
	e.start()

	// The image every network runs, for the attachments' "image".
	nets := map[string]api.Generation{}
	for _, n := range mustNetworks(t, e) {
		nets[n.Network] = n
	}
	if nets["a"].Image == "" || !nets["a"].Default || nets["b"].Default {
		t.Fatalf("networks: %+v", nets)
	}

	// Defaults only.
	p1 := e.createPod("--name", "kte-one")
	// Explicit list, in order.
	p2 := e.createPod("--name", "kte-two", "--net", "a", "--net", "b")
	// Args: host-local honours IP (cni-wrapper passes args.cni as CNI_ARGS too).
	p3 := e.createPod("--net", "b:IP=10.205.0.77")

	checkShape := func(p *api.Pod, wantNets ...string) {
		t.Helper()
		if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(p.ID) {
			t.Errorf("pod id %q is not a UUID", p.ID)
		}
		if want := filepath.Join(e.RunDir, "netns", p.ID); p.Netns != want {
			t.Errorf("pod %s netns %q, want %q", p.ID, p.Netns, want)
		}
		if time.Since(p.Created) > time.Minute || p.Created.IsZero() {
			t.Errorf("pod %s created %v", p.ID, p.Created)
		}
		var got []string
		for _, a := range p.Attachments {
			got = append(got, a.Network)
			if a.Image != nets[a.Network].Image {
				t.Errorf("pod %s network %s image %q, want %q", p.ID, a.Network, a.Image, nets[a.Network].Image)
			}
			var r struct {
				CNIVersion string `json:"cniVersion"`
			}
			if err := json.Unmarshal(a.Result, &r); err != nil || r.CNIVersion != "1.1.0" {
				t.Errorf("pod %s network %s result not CNI 1.1.0 (%v): %s", p.ID, a.Network, err, a.Result)
			}
		}
		if strings.Join(got, ",") != strings.Join(wantNets, ",") {
			t.Errorf("pod %s networks %v, want %v", p.ID, got, wantNets)
		}
		links := strings.Join(linksIn(t, p.Netns), ",")
		for _, a := range p.Attachments {
			if !strings.Contains(","+links+",", ","+a.Interface+",") {
				t.Errorf("pod %s: interface %s of %s not in netns (links %s)", p.ID, a.Interface, a.Network, links)
			}
		}
	}
	checkShape(p1, "a")
	checkShape(p2, "a", "b")
	checkShape(p3, "b")
	if p1.Name != "kte-one" || p2.Name != "kte-two" {
		t.Errorf("names %q %q", p1.Name, p2.Name)
	}
	if p1.Attachments[0].Interface != "eth0" || p2.Attachments[0].Interface != "eth0" {
		t.Errorf("eth{{num}} gave %q and %q, want eth0", p1.Attachments[0].Interface, p2.Attachments[0].Interface)
	}
	if !regexp.MustCompile(`^net1[0-9a-z]{4}$`).MatchString(p2.Attachments[1].Interface) {
		t.Errorf("net{{num}}{{random 4}} for the second network gave %q", p2.Attachments[1].Interface)
	}
	if !regexp.MustCompile(`^net0[0-9a-z]{4}$`).MatchString(p3.Attachments[0].Interface) {
		t.Errorf("net{{num}}{{random 4}} for the first network gave %q", p3.Attachments[0].Interface)
	}
	ip1, ip2, ip3 := podIPs(t, p1), podIPs(t, p2), podIPs(t, p3)
	if ip3["b"] != "10.205.0.77" {
		t.Errorf("--net b:IP=10.205.0.77 got address %q", ip3["b"])
	}

	// inspect -o json: the same pod, the documented keys.
	out := e.mustCtl("pod", "inspect", "-o", "json", p2.ID)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	for _, k := range []string{"id", "name", "netns", "networks", "created"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("inspect -o json lacks %q: %s", k, out)
		}
	}
	var created string
	_ = json.Unmarshal(raw["created"], &created)
	if _, err := time.Parse(time.RFC3339, created); err != nil {
		t.Errorf("created %q is not RFC 3339: %v", created, err)
	}
	var rawNets []map[string]json.RawMessage
	_ = json.Unmarshal(raw["networks"], &rawNets)
	if len(rawNets) != 2 {
		t.Fatalf("inspect networks: %s", raw["networks"])
	}
	for _, k := range []string{"name", "interface", "image", "result"} {
		if _, ok := rawNets[1][k]; !ok {
			t.Errorf("inspect networks[1] lacks %q", k)
		}
	}
	if ls := e.listPods(); len(ls) != 3 {
		t.Errorf("pod ls lists %d pods, want 3", len(ls))
	}

	// Pods reach each other on both bridges.
	ping(t, p1.Netns, ip2["a"])
	ping(t, p2.Netns, ip1["a"])
	ping(t, p2.Netns, ip3["b"])
	ping(t, p3.Netns, ip2["b"])

	// What the delete must remove is there: one lease and one host veth per
	// attachment.
	if n := len(testutil.HostLocalLeases(e.StateDir)); n != 4 {
		t.Errorf("%d host-local reservations for 4 attachments: %v", n, testutil.HostLocalLeases(e.StateDir))
	}
	if n := len(e.podVeths()); n != 4 {
		t.Errorf("%d veths on the bridges for 4 attachments: %v", n, e.podVeths())
	}

	e.mustCtl("pod", "rm", p1.ID, p2.ID, p3.ID)
	// Deleting twice is fine: either a no-op or a plain 404, nothing else.
	if _, errOut, err := e.ctl("pod", "rm", p1.ID); err != nil && !strings.Contains(errOut, "not found") {
		t.Errorf("second pod rm: %v %s", err, errOut)
	}
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

func mustNetworks(t *testing.T, e *env) []api.Generation {
	t.Helper()
	out := e.mustCtl("net", "ls", "-o", "json")
	var nets []api.Generation
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		t.Fatalf("net ls -o json: %v\n%s", err, out)
	}
	return nets
}

// TestDeleteWhileCreating: a pod whose create is under way is listed, by
// pod ls and GET, as creating, from the instant it is journaled; a pod rm
// of it by name then waits for the create and removes the pod, rather than
// answering "not found" while the pod is created anyway. The create, held
// in its add (cnitest's "wait"), is let go once kurmad says the rm waits.
func TestDeleteWhileCreating(t *testing.T) {
	e := newEnv(t)
	e.writeConfig([]netDef{cnitestNet("slow", "ok")}, nil)
	e.start()
	state := filepath.Join(e.StateDir, "networks", "slow")

	create := exec.Command(bin("kurmactl"), "--socket", e.Socket, "pod", "create", "--name", "web", "--net", "slow:BEHAVIOR=wait", "-o", "json")
	var createOut, createErr bytes.Buffer
	create.Stdout, create.Stderr = &createOut, &createErr
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() { created <- create.Wait() }()
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(state, "cnitest-wait-release"), nil, 0o600) })
	testutil.WaitFor(t, 30*time.Second, "the create's add to start", func() error {
		_, err := os.Stat(filepath.Join(state, "cnitest-wait-started"))
		return err
	})

	pods := e.listPods()
	if len(pods) != 1 || pods[0].Name != "web" || pods[0].State != api.PodCreating {
		t.Fatalf("pod ls while the create runs: %+v, want web creating", pods)
	}
	if out := e.mustCtl("pod", "ls"); !regexp.MustCompile(`(?m)^\S+ +web .* creating$`).MatchString(out) {
		t.Errorf("pod ls while the create runs:\n%s", out)
	}
	got, err := e.Client.GetPod(context.Background(), pods[0].ID)
	if err != nil || got.State != api.PodCreating {
		t.Errorf("GET of the pod being created: %+v, %v", got, err)
	}

	rm := exec.Command(bin("kurmactl"), "--socket", e.Socket, "pod", "rm", "web")
	var rmOut, rmErr bytes.Buffer
	rm.Stdout, rm.Stderr = &rmOut, &rmErr
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	removed := make(chan error, 1)
	go func() { removed <- rm.Wait() }()
	// The rm found web by its name in the list (it did not when pods
	// being created were left out); its DELETE waits for the create,
	// which kurmad logs, and which the test lets go only then: the rm
	// must not be answered "not found" nor remove half a pod.
	testutil.WaitFor(t, 30*time.Second, "the rm to wait for the create", func() error {
		select {
		case err := <-removed:
			t.Fatalf("pod rm web ended while the create was held: %v, stdout %q, stderr %q", err, &rmOut, &rmErr)
		default:
		}
		if err := e.SyncLog(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(e.Log(), "waiting for the pod's create under way to end") {
			return fmt.Errorf("kurmad did not log the delete's wait yet")
		}
		return nil
	})
	if err := os.WriteFile(filepath.Join(state, "cnitest-wait-release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatalf("the create: %v\n%s", err, &createErr)
	}
	if err := <-removed; err != nil || strings.TrimSpace(rmOut.String()) != pods[0].ID {
		t.Fatalf("pod rm web while it was created: %v, stdout %q, stderr %q", err, &rmOut, &rmErr)
	}
	if left := e.listPods(); len(left) != 0 {
		t.Errorf("pods after the rm: %+v", left)
	}
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}
