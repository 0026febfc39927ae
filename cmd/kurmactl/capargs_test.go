package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// TestCreateCapabilityFlags: --publish, --ip, --mac and --bandwidth become
// the create's runtime_config, for the pod's one network (a default one
// when there is no --net) or the network a NAME: prefix names.
func TestCreateCapabilityFlags(t *testing.T) {
	sock, b := serve(t)
	mustRun(t, sock, "pod", "create", "--publish", "18090:80", "--publish", "18091:53/udp", "--bandwidth", "10mbit")
	mustRun(t, sock, "pod", "create", "--net", "mynet", "--net", "other", "--ip", "other:10.1.0.9", "--mac", "mynet:C2:00:00:00:00:01",
		"--publish", "other:8080:80")
	created := b.Created()
	want := []map[string]map[string]string{
		{"mynet": {
			"portMappings": `[{"hostPort":18090,"containerPort":80,"protocol":"tcp"},{"hostPort":18091,"containerPort":53,"protocol":"udp"}]`,
			"bandwidth":    `{"egressBurst":1000000,"egressRate":10000000,"ingressBurst":1000000,"ingressRate":10000000}`,
		}},
		{
			"mynet": {"mac": `"c2:00:00:00:00:01"`},
			"other": {"ips": `["10.1.0.9"]`, "portMappings": `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`},
		},
	}
	for i, w := range want {
		got := map[string]map[string]string{}
		for network, caps := range created[i].RuntimeConfig {
			got[network] = map[string]string{}
			for k, v := range caps {
				got[network][k] = string(v)
			}
		}
		if b1, b2 := jsonOf(t, got), jsonOf(t, w); b1 != b2 {
			t.Errorf("create %d runtime_config\n%s\nwant\n%s", i, b1, b2)
		}
	}
}

func TestCreateCapabilityFlagErrors(t *testing.T) {
	sock, _ := serve(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--net", "mynet", "--net", "other", "--publish", "18090:80"}, "the pod joins several networks (mynet, other): say which with a NAME: prefix, e.g. --publish mynet:18090"},
		{[]string{"--publish", "18090"}, "HOSTPORT:CONTAINERPORT"},
		{[]string{"--publish", "18090:80/icmp"}, `protocol "icmp"`},
		{[]string{"--publish", "0:80"}, `"0" is not a port`},
		{[]string{"--ip", "ten"}, `"ten" is not an IP address`},
		{[]string{"--mac", "zz"}, `"zz" is not an Ethernet address`},
		{[]string{"--mac", "c2:00:00:00:00:01", "--mac", "c2:00:00:00:00:02"}, "mac is given twice"},
		{[]string{"--bandwidth", "fast"}, `"fast" is not a rate`},
	} {
		_, stderr, code := kurmactl(t, sock, append([]string{"pod", "create"}, tt.args...)...)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("pod create %v: exit %d, stderr %q; want it to fail saying %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestPodOwner: a runtime's pod shows RUNTIME/CONTAINER in pod ls and its
// runtime side in inspect, and, while kurmad releases it because its
// runtime dropped it, why.
func TestPodOwner(t *testing.T) {
	sock, b := serve(t)
	p, err := api.NewClient(sock).CreatePod(context.Background(), api.CreatePodRequest{Name: "default/web",
		Runtime: &api.Runtime{Owner: "podman", ContainerID: "0123456789abcdef0123", Interface: "eth0", Network: "kurma", Netns: "/run/netns/cni-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, sock, "pod", "ls"); !strings.Contains(out, "podman/0123456789ab ") {
		t.Errorf("pod ls lacks the owner podman/0123456789ab:\n%s", out)
	}
	out := mustRun(t, sock, "pod", "inspect", "default/web")
	if !strings.Contains(out, "Owner:    podman (container 0123456789abcdef0123, interface eth0, CNI network kurma, netns /run/netns/cni-1)") ||
		strings.Contains(out, "Dropped:") {
		t.Errorf("pod inspect:\n%s", out)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.SetPodDropped(p.ID, "the runtime's netns /run/netns/cni-1 names no namespace any more", at)
	out = mustRun(t, sock, "pod", "inspect", "default/web")
	want := "Dropped:  " + at.Local().Format(time.RFC3339) + " by its runtime: the runtime's netns /run/netns/cni-1 names no namespace any more; kurmad releases the pod"
	if !strings.Contains(out, want) {
		t.Errorf("pod inspect of a dropped pod lacks %q:\n%s", want, out)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDefaultNetworks: a default network with two generations (a new one
// starting beside the serving one) is one network the pod joins, so an
// unprefixed capability flag still goes to it.
func TestDefaultNetworks(t *testing.T) {
	got := defaultNetworks([]api.Generation{
		{Network: "mynet", Generation: 2, Default: true, State: api.StateStarting},
		{Network: "mynet", Generation: 1, Default: true, State: api.StateRunning},
		{Network: "other", Generation: 1},
		{Network: "third", Generation: 1, Default: true, State: api.StateRunning},
	})
	if !slices.Equal(got, []string{"mynet", "third"}) {
		t.Errorf("defaultNetworks = %v, want [mynet third]", got)
	}
}
