package kurmacni

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// agent is a node agent on a unix socket (kurma-node's side is
// pkg/k8snode, tested on a real cluster by test/k8s): it refuses the
// networks in deny, and records what it is asked and told.
type agent struct {
	mu       sync.Mutex
	asked    []AccessRequest
	reported []AttachedReport
	deny     map[string]bool
	// resolve maps references ("namespace/name", the pod's namespace
	// filled in) to the kurma networks serving them; one it lacks is
	// refused.
	resolve map[string]string
}

func serveAgent(t *testing.T, a *agent) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+AccessPath, func(w http.ResponseWriter, r *http.Request) {
		var req AccessRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.asked = append(a.asked, req)
		for _, n := range req.Networks {
			if a.deny[n] {
				w.WriteHeader(http.StatusForbidden)
				_ = json.NewEncoder(w).Encode(AgentError{Message: `network "` + n + `" does not admit pods of namespace "default"`})
				return
			}
		}
		var answer AccessAnswer
		for _, r := range req.References {
			if r.Namespace == "" {
				r.Namespace = req.Namespace
			}
			n, ok := a.resolve[r.String()]
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				_ = json.NewEncoder(w).Encode(AgentError{Message: `no NetworkAttachmentDefinition ` + r.String()})
				return
			}
			answer.Networks = append(answer.Networks, n)
		}
		if len(answer.Networks) > 0 {
			_ = json.NewEncoder(w).Encode(answer)
		}
	})
	mux.HandleFunc("POST "+AttachedPath, func(w http.ResponseWriter, r *http.Request) {
		var rep AttachedReport
		_ = json.NewDecoder(r.Body).Decode(&rep)
		a.mu.Lock()
		a.reported = append(a.reported, rep)
		a.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// TestNodeAgent: with "node_agent", a Kubernetes pod's networks are asked
// of the agent before kurmad attaches anything; a refusal fails the ADD
// with code 120 and its message, and kurmad creates nothing; an agent
// that does not answer fails it with code 11 (try again), never lets it
// through; after an ADD the agent is told the pod's attachments in
// multus' network-status shape, the first the default.
func TestNodeAgent(t *testing.T) {
	sock, b := serve(t)
	a := &agent{deny: map[string]bool{"other": true}}
	agentSock := serveAgent(t, a)
	withAgent := func(sock, annotation string) []byte {
		return conf("1.0.0", sock, "mynet", map[string]any{"node_agent": agentSock,
			"runtimeConfig": map[string]any{PodAnnotationsCapability: map[string]string{NetworksAnnotation: annotation}}})
	}
	before := len(b.Created())
	checkCNIError(t, newPlugin(io.Discard).Add(cmdArgs(withAgent(sock, "other"), "agent1", "eth0")), ErrAccessDenied, `network "other" does not admit`)
	if len(b.Created()) != before {
		t.Errorf("kurmad was asked to create %+v for a refused pod", b.Created()[before:])
	}
	if len(a.asked) != 1 || a.asked[0].Namespace != "default" || a.asked[0].Pod != "web" || !slices.Equal(a.asked[0].Networks, []string{"mynet", "other"}) {
		t.Errorf("the agent was asked %+v", a.asked)
	}

	a.deny = nil
	var out bytes.Buffer
	args := cmdArgs(withAgent(sock, "other@data0"), "agent2", "eth0")
	if err := newPlugin(&out).Add(args); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	rep := a.reported
	a.mu.Unlock()
	if len(rep) != 1 || rep[0].Pod != "web" || rep[0].ContainerID != "agent2" || len(rep[0].Status) != 2 {
		t.Fatalf("the agent was told %+v", rep)
	}
	st := rep[0].Status
	if st[0].Name != "mynet" || st[0].Interface != "eth0" || !st[0].Default || st[1].Name != "other" || st[1].Interface != "data0" || st[1].Default || len(st[0].IPs) == 0 {
		t.Errorf("network-status %+v", st)
	}
	if err := newPlugin(io.Discard).Del(args); err != nil {
		t.Fatal(err)
	}

	gone := conf("1.0.0", sock, "mynet", map[string]any{"node_agent": filepath.Join(t.TempDir(), "none.sock")})
	checkCNIError(t, newPlugin(io.Discard).Add(cmdArgs(gone, "agent3", "eth0")), types.ErrTryAgainLater, "cannot check the pod's access")
}

// TestNodeAgentResolvesMultus: the references of a pod's Multus
// annotations (a NetworkAttachmentDefinition by name, in the pod's
// namespace, or by namespace/name) are resolved by the agent, asked with
// the pod's kurma networks; kurmad attaches the networks it named, with
// the interfaces the annotation asked for; a reference the agent cannot
// resolve fails the ADD with its message, and kurmad creates nothing.
func TestNodeAgentResolvesMultus(t *testing.T) {
	sock, b := serve(t)
	a := &agent{resolve: map[string]string{"default/sidenet": "other", "team-a/macvlan": "third"}}
	agentSock := serveAgent(t, a)
	withAgent := func(annotations map[string]string) []byte {
		return conf("1.0.0", sock, "mynet", map[string]any{"node_agent": agentSock,
			"runtimeConfig": map[string]any{PodAnnotationsCapability: annotations}})
	}
	args := cmdArgs(withAgent(map[string]string{MultusNetworksAnnotation: "sidenet@data0, team-a/macvlan"}), "multus1", "eth0")
	if err := newPlugin(io.Discard).Add(args); err != nil {
		t.Fatal(err)
	}
	req := b.Created()[len(b.Created())-1]
	var names []string
	for _, n := range req.Networks {
		name, _, _ := strings.Cut(n, ":")
		names = append(names, name)
	}
	if !slices.Equal(names, []string{"mynet", "other", "third"}) || req.Interfaces["other"] != "data0" || req.Interfaces["third"] != "net1" {
		t.Errorf("kurmad was asked for networks %q, interfaces %v; want mynet, other as data0, third as net1", req.Networks, req.Interfaces)
	}
	a.mu.Lock()
	asked := a.asked[len(a.asked)-1]
	a.mu.Unlock()
	if !slices.Equal(asked.Networks, []string{"mynet"}) || len(asked.References) != 2 || asked.References[0] != (NetworkRef{Name: "sidenet"}) ||
		asked.References[1] != (NetworkRef{Namespace: "team-a", Name: "macvlan"}) {
		t.Errorf("the agent was asked %+v", asked)
	}
	if err := newPlugin(io.Discard).Del(args); err != nil {
		t.Fatal(err)
	}

	before := len(b.Created())
	args = cmdArgs(withAgent(map[string]string{MultusNetworksAnnotation: `[{"name": "nope", "namespace": "team-a"}]`}), "multus2", "eth0")
	checkCNIError(t, newPlugin(io.Discard).Add(args), ErrAccessDenied, "no NetworkAttachmentDefinition team-a/nope")
	if len(b.Created()) != before {
		t.Errorf("kurmad was asked to create %+v for a reference the agent could not resolve", b.Created()[before:])
	}

	// A reference resolved to a network the pod names already.
	args = cmdArgs(withAgent(map[string]string{NetworksAnnotation: "other", MultusNetworksAnnotation: "sidenet"}), "multus3", "eth0")
	checkCNIError(t, newPlugin(io.Discard).Add(args), types.ErrInvalidNetworkConfig, `the pod names network "other" twice`)
}
