package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/api"
)

// TestWaitForTheDefaultNetworks: wait returns once kurmad serves and its
// default network runs, not when the API first answers, saying on stderr
// what it waits for.
func TestWaitForTheDefaultNetworks(t *testing.T) {
	sock, b := serve(t)
	b.SetGeneration(api.Generation{Network: "mynet", State: api.StateFetching, Default: true})
	type result struct {
		stderr string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		_, errOut, code := kurmactl(t, sock, "wait", "--timeout", "30s")
		done <- result{errOut, code}
	}()
	// Its first look at the networks, then its wait for their next change.
	b.WaitRevisionReads(t, 2)
	select {
	case r := <-done:
		t.Fatalf("wait returned (exit %d) while mynet was fetching: %s", r.code, r.stderr)
	default:
	}
	b.SetGeneration(api.Generation{Network: "mynet", State: api.StateStarting, Default: true})
	b.WaitRevisionReads(t, 3)
	b.SetGeneration(api.Generation{Network: "mynet", State: api.StateRunning, Default: true})
	r := <-done
	want := "waiting for kurmad's API at " + sock + "\nwaiting for network mynet (fetching)\nwaiting for network mynet (starting)\nready: kurmad serves and network mynet runs\n"
	if r.code != 0 || r.stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", r.code, r.stderr, want)
	}
}

// TestWaitFailsNamingWhatIsNotRunning: a network that does not run by the
// timeout is named with its state and reason; a network kurmad does not
// have is an error at once; --networks naming none waits for the API
// alone.
func TestWaitFailsNamingWhatIsNotRunning(t *testing.T) {
	sock, _ := serve(t)
	_, errOut, code := kurmactl(t, sock, "wait", "--networks", "mynet,broken", "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "kurmactl: not ready within 300ms: network broken (failed: main exited with status 1)") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = kurmactl(t, sock, "wait", "--networks", "nosuch")
	if code != 1 || !strings.Contains(errOut, "kurmad has no network nosuch (its networks: mynet, other, broken)") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = kurmactl(t, sock, "wait", "--networks", "")
	if code != 0 || !strings.HasSuffix(errOut, "ready: kurmad serves\n") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = kurmactl(t, filepath.Join(t.TempDir(), "none.sock"), "wait", "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "kurmad did not answer within 300ms") {
		t.Errorf("no kurmad: exit %d, stderr %q", code, errOut)
	}
}

// TestWaitForThePolicyNetwork: when a default network is policed, wait
// waits for the policy network too (a pod joins it unpoliced until that
// runs); when none is, only for the default networks.
func TestWaitForThePolicyNetwork(t *testing.T) {
	gens := []api.Generation{
		{Network: "podnet", Generation: 1, State: api.StateRunning, Default: true, Role: api.RoleAttach, NetworkPolicy: true},
		{Network: "web", Generation: 1, State: api.StateRunning, Role: api.RoleAttach},
		{Network: "netpol", Generation: 1, State: api.StateRetiring, Role: api.RolePolicy},
		{Network: "netpol", Generation: 2, State: api.StateFetching, Role: api.RolePolicy, PolicyNetworks: []string{"podnet"}},
	}
	if got := waitFor(gens); !slices.Equal(got, []string{"podnet", "netpol"}) {
		t.Errorf("policed default network: waits for %q, want podnet and netpol", got)
	}
	if got := notRunning(gens, waitFor(gens)); !strings.HasPrefix(got, "network netpol (fetching") {
		t.Errorf("not running: %q, want netpol (fetching)", got)
	}
	gens[0].NetworkPolicy = false
	if got := waitFor(gens); !slices.Equal(got, []string{"podnet"}) {
		t.Errorf("unpoliced default network: waits for %q, want podnet alone", got)
	}
}
