package k8snode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
	"github.com/kurma-project/kurma/pkg/kurmacni"
)

// TestFollowNetworks: a change of a generation's state in kurmad reaches
// the follower as it happens (its wait was held; no timer could bring it:
// the test waits for the delivery, not for a time), and the follower
// survives kurmad's restart: it reconnects and delivers the new kurmad's
// generations.
func TestFollowNetworks(t *testing.T) {
	dir, err := os.MkdirTemp("", "kfol") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kurmad.sock")
	log := logrus.New()
	log.SetOutput(io.Discard)
	serve := func(b api.Backend) (stop func()) {
		l, err := api.Listen(sock, api.ListenOptions{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- api.NewServer(b, api.ServerOptions{Logger: log}).Serve(ctx, l, time.Second) }()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			l.Close()
		}
		t.Cleanup(stop)
		return stop
	}
	first := apitest.New([]string{"podnet"}, 1)
	stop := serve(first)

	got := make(chan []api.Generation, 8)
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() {
		FollowNetworks(ctx, api.NewClient(sock), log, func(g []api.Generation) { got <- g })
		close(followed)
	}()
	defer func() {
		cancel()
		<-followed
	}()
	next := func(what string) api.Generation {
		t.Helper()
		select {
		case g := <-got:
			if len(g) != 1 {
				t.Fatalf("%s: %+v, want podnet's one generation", what, g)
			}
			return g[0]
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not delivered", what)
		}
		panic("unreachable")
	}
	if g := next("the first state"); g.State != api.StateRunning {
		t.Fatalf("the first state: %+v", g)
	}
	// Held: the first answer's revision is waited on (a read for the
	// first answer, one for the held wait).
	first.WaitRevisionReads(t, 2)
	first.SetGeneration(api.Generation{Network: "podnet", Generation: 1, State: api.StateUnavailable, Reason: "no lease"})
	if g := next("a change"); g.State != api.StateUnavailable || g.Reason != "no lease" {
		t.Errorf("after a change: %+v, want unavailable: no lease", g)
	}

	// kurmad restarts: its held wait is answered as it stops, the
	// follower cannot connect for a while, then the new kurmad answers.
	stop()
	second := apitest.New([]string{"podnet"}, 1)
	second.SetGeneration(api.Generation{Network: "podnet", Generation: 2, State: api.StateStarting})
	serve(second)
	if g := next("the restarted kurmad's state"); g.Generation != 2 || g.State != api.StateStarting {
		t.Errorf("after the restart: %+v, want generation 2 starting", g)
	}
	second.WaitRevisionReads(t, 2)
	second.SetGeneration(api.Generation{Network: "podnet", Generation: 2, State: api.StateRunning})
	if g := next("a change after the restart"); g.State != api.StateRunning {
		t.Errorf("after a change after the restart: %+v, want running", g)
	}
	select {
	case g := <-got:
		t.Errorf("delivered with nothing changed: %+v", g)
	default:
	}
}

// watcherRig is a NetworkWatcher above its seams: client-go's fake
// clients for the API server (a patch of a Network's status is recorded,
// as the fake cannot apply), and the real API over a fake kurmad
// (apitest), run until the test ends.
type watcherRig struct {
	w       *NetworkWatcher
	cs      *k8sfake.Clientset
	dyn     *dynfake.FakeDynamicClient
	kurmad  *apitest.Backend
	dir     string
	mu      sync.Mutex
	reloads int
	applied []map[string]any // the status applies, oldest first
}

const rigNamespace = "kurma-system"

func newWatcherRig(t *testing.T, kurmadNets []string, objs []runtime.Object, networks ...map[string]any) *watcherRig {
	t.Helper()
	return newWatcherRigWith(t, rigOptions{}, kurmadNets, objs, networks...)
}

// rigOptions are what a rig's watcher gets beyond the defaults: the node
// it renders for, its Router.
type rigOptions struct {
	input  Input
	router Router
	// nads are NetworkAttachmentDefinitions, whose CRD the API server then
	// has; nadImage serves them.
	nads     []map[string]any
	nadImage string
}

func newWatcherRigWith(t *testing.T, ro rigOptions, kurmadNets []string, objs []runtime.Object, networks ...map[string]any) *watcherRig {
	t.Helper()
	r := &watcherRig{dir: t.TempDir(), kurmad: apitest.New(kurmadNets, 1)}
	r.kurmad.Hook = func(method, _ string) error {
		if method == "Reload" {
			r.mu.Lock()
			r.reloads++
			r.mu.Unlock()
		}
		return nil
	}
	sock := apitest.Serve(t, r.kurmad)
	r.cs = k8sfake.NewClientset(objs...)
	var nets []runtime.Object
	for _, n := range networks {
		nets = append(nets, &unstructured.Unstructured{Object: n})
	}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NetworkGVR: "NetworkList", NADGVR: "NetworkAttachmentDefinitionList"}, nets...)
	var crds []runtime.Object
	scheme := metafake.NewTestScheme()
	crdKind := schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	scheme.AddKnownTypeWithName(crdKind, &metav1.PartialObjectMetadata{})
	scheme.AddKnownTypeWithName(crdKind.GroupVersion().WithKind("CustomResourceDefinitionList"), &metav1.PartialObjectMetadataList{})
	if len(ro.nads) > 0 {
		crd := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: NADCRD}}
		crd.SetGroupVersionKind(crdKind)
		crds = append(crds, crd)
	}
	// Made through their resource: the fake's tracker would guess another
	// from their kind.
	for _, n := range ro.nads {
		u := &unstructured.Unstructured{Object: n}
		if _, err := dyn.Resource(NADGVR).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.dyn = dyn
	dyn.PrependReactor("patch", NetworkResource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		var body map[string]any
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			return true, nil, err
		}
		r.mu.Lock()
		r.applied = append(r.applied, body)
		r.mu.Unlock()
		out := &unstructured.Unstructured{Object: body}
		body = maps.Clone(body)
		body["_name"], body["_sub"] = p.GetName(), p.GetSubresource()
		r.mu.Lock()
		r.applied[len(r.applied)-1] = body
		r.mu.Unlock()
		return true, out, nil
	})
	log := logrus.New()
	log.SetOutput(io.Discard)
	w, err := newNetworkWatcher(r.cs, dyn, metafake.NewSimpleMetadataClient(scheme, crds...), WatcherOptions{
		NodeName: "n1", Namespace: rigNamespace, Config: filepath.Join(r.dir, "kurmad.json"), BaseDir: r.dir,
		Kurmad: api.NewClient(sock), Router: ro.router, NADImage: ro.nadImage, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	r.w = w
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-ran
	})
	w.Start(ctx, 10*time.Second)
	cfg, err := w.Render(ctx, []byte(mergeBase), ro.input)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(w.Config, bytes.NewReader(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(ran)
		w.Run(ctx)
	}()
	return r
}

// config is kurmad's config as the watcher last wrote it.
func (r *watcherRig) config(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(r.w.Config)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// nodeState is the state of the last status this node applied to
// network, "" for none.
func (r *watcherRig) nodeState(network string) (state, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.applied) - 1; i >= 0; i-- {
		b := r.applied[i]
		if md, _ := b["metadata"].(map[string]any); md == nil || md["name"] != network {
			continue
		}
		st, _ := b["status"].(map[string]any)
		nodes, _ := st["nodes"].([]any)
		for _, n := range nodes {
			if n, _ := n.(map[string]any); n["node"] == "n1" {
				s, _ := n["state"].(string)
				why, _ := n["reason"].(string)
				return s, why
			}
		}
	}
	return "", ""
}

// patches are the recorded patches of network's subresource sub ("" for
// the object), oldest first.
func (r *watcherRig) patches(network, sub string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, b := range r.applied {
		if b["_name"] == network && b["_sub"] == sub {
			out = append(out, b)
		}
	}
	return out
}

// keyedNetwork is a Network whose trust is key net.asc of Secret
// net-keys in kurma's namespace.
func keyedNetwork() map[string]any {
	return map[string]any{"apiVersion": NetworkGroup + "/" + NetworkVersion, "kind": "Network",
		"metadata": map[string]any{"name": "keyed", "resourceVersion": "1", "generation": int64(1)},
		"spec": map[string]any{"image": "https://example.com/net.aci", "imageName": "example.com/net",
			"trust":  map[string]any{"kind": TrustAppcKey, "secretRef": map[string]any{"name": "net-keys", "key": "net.asc"}},
			"config": map[string]any{"type": "bridge", "bridge": "kt1"}}}
}

// TestWatcherFollowsKurmad: a change of a Network's generation in kurmad
// reaches the object's status for this node as it happens (the watcher
// has no timer that could bring it: the test waits for the write).
func TestWatcherFollowsKurmad(t *testing.T) {
	dir := t.TempDir()
	_, key := testutil.SigningKey(t, dir, "net")
	k, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "net-keys", Namespace: rigNamespace}, Data: map[string][]byte{"net.asc": k}}
	r := newWatcherRig(t, []string{"podnet", "keyed"}, []runtime.Object{secret}, keyedNetwork())
	state := func(want string) func() error {
		return func() error {
			if s, why := r.nodeState("keyed"); s != want {
				return fmt.Errorf("keyed's status on n1: %q %q, want %s", s, why, want)
			}
			return nil
		}
	}
	testutil.WaitFor(t, 10*time.Second, "keyed running on n1", state(api.StateRunning))
	r.kurmad.SetGeneration(api.Generation{Network: "keyed", Generation: 2, State: api.StateFailed, Reason: "no such image"})
	testutil.WaitFor(t, 10*time.Second, "keyed failed on n1", state(api.StateFailed))
}

// TestWatcherAppliesSecretChanges: a new key in the Secret a Network's
// spec.trust names reaches kurmad's config, and kurmad reloads, without a
// change of the Network or a resync (10 minutes away).
func TestWatcherAppliesSecretChanges(t *testing.T) {
	dir := t.TempDir()
	_, key1 := testutil.SigningKey(t, dir, "one")
	_, key2 := testutil.SigningKey(t, dir, "two")
	k1, err := os.ReadFile(key1)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := os.ReadFile(key2)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "net-keys", Namespace: rigNamespace}, Data: map[string][]byte{"net.asc": k1}}
	r := newWatcherRig(t, []string{"podnet", "keyed"}, []runtime.Object{secret}, keyedNetwork())
	file := func(k []byte) string { return fmt.Sprintf("keyed-%x.asc", sha256.Sum256(k)) }
	if cfg := r.config(t); !strings.Contains(cfg, file(k1)) {
		t.Fatalf("kurmad's config does not trust the Secret's key (%s):\n%s", file(k1), cfg)
	}
	secret = secret.DeepCopy()
	secret.Data["net.asc"] = k2
	secret.ResourceVersion = "2"
	if _, err := r.cs.CoreV1().Secrets(rigNamespace).Update(context.Background(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the Secret's new key in kurmad's config, and a reload", func() error {
		if cfg := r.config(t); !strings.Contains(cfg, file(k2)) {
			return fmt.Errorf("not in the config: %s", file(k2))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.reloads == 0 {
			return errors.New("kurmad not reloaded")
		}
		return nil
	})
	if cfg := r.config(t); strings.Contains(cfg, file(k1)) {
		t.Errorf("kurmad's config still trusts the replaced key:\n%s", cfg)
	}
}

// recordingRouter is a Router that keeps what it was last asked.
type recordingRouter struct {
	mu   sync.Mutex
	last []SpanRoutes
	n    int
}

func (rr *recordingRouter) Route(nets []SpanRoutes) error {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.last, rr.n = nets, rr.n+1
	return nil
}

func (rr *recordingRouter) routes() string {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return fmt.Sprint(rr.last)
}

// spreadNetwork is a Network kurma spans across the nodes, with n2's
// block taken already.
func spreadNetwork(rv string, status map[string]any) map[string]any {
	return map[string]any{"apiVersion": NetworkGroup + "/" + NetworkVersion, "kind": "Network",
		"metadata": map[string]any{"name": "spread", "resourceVersion": rv, "generation": int64(1)},
		"spec": map[string]any{"image": "file:///net.aci", "scope": ScopeCluster, "subnet": "10.77.0.0/16",
			"config": map[string]any{"type": "bridge", "bridge": "kt1", "ipam": map[string]any{"type": "host-local",
				"ranges": []any{[]any{map[string]any{"subnet": "__NODE_BLOCK__"}}}, "routes": []any{map[string]any{"dst": "__NETWORK_SUBNET__"}}}}},
		"status": status}
}

// TestWatcherSpansNetwork: for a Network of spec.scope cluster with a
// subnet, the node takes the first block no other node holds, by a patch
// of status.nodes bound to the resourceVersion it chose on; once the
// object says so, kurmad's config has the node's block and the subnet in
// place of the placeholders, and the other node's block is routed via its
// address. kurmad counting pods of it on the node puts the node's
// finalizer on the object, and none takes it off.
func TestWatcherSpansNetwork(t *testing.T) {
	node := &NodeObject{}
	node.Metadata.Name = "n1"
	node.Status.Addresses = []NodeAddress{{"InternalIP", "10.99.0.1"}}
	rr := &recordingRouter{}
	other := map[string]any{"node": "n2", "state": "running", "block": "10.77.0.0/24", "address": "10.99.0.2", "lastTransitionTime": "2026-01-01T00:00:00Z"}
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}
	r := newWatcherRigWith(t, rigOptions{input: Input{Node: node}, router: rr}, []string{"podnet", "spread"}, []runtime.Object{n2},
		spreadNetwork("5", map[string]any{"nodes": []any{other}}))
	var claim map[string]any
	testutil.WaitFor(t, 10*time.Second, "n1's claim of a block", func() error {
		for _, p := range r.patches("spread", "status") {
			if md, _ := p["metadata"].(map[string]any); md != nil && md["resourceVersion"] == "5" {
				claim = p
				return nil
			}
		}
		return errors.New("no patch bound to resourceVersion 5")
	})
	nodes, _ := claim["status"].(map[string]any)["nodes"].([]any)
	var mine map[string]any
	for _, n := range nodes {
		if n := n.(map[string]any); n["node"] == "n1" {
			mine = n
		}
	}
	if len(nodes) != 2 || mine["block"] != "10.77.1.0/24" || mine["address"] != "10.99.0.1" {
		t.Fatalf("the claim %v: want n2.s and n1.s entries, n1 with block 10.77.1.0/24 via 10.99.0.1", claim)
	}
	if strings.Contains(r.config(t), `"spread"`) {
		t.Errorf("spread in kurmad's config before n1 has a block:\n%s", r.config(t))
	}
	// The API server took the claim.
	mine["state"] = "pending"
	u := &unstructured.Unstructured{Object: spreadNetwork("6", map[string]any{"nodes": []any{other, mine}})}
	if _, err := r.dyn.Resource(NetworkGVR).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "spread in kurmad's config with n1's block", func() error {
		if cfg := r.config(t); !strings.Contains(cfg, `"subnet": "10.77.1.0/24"`) || !strings.Contains(cfg, `"dst": "10.77.0.0/16"`) {
			return fmt.Errorf("config:\n%s", cfg)
		}
		return nil
	})
	testutil.WaitFor(t, 10*time.Second, "n2's block routed via n2", func() error {
		if got, want := rr.routes(), "[{spread 10.77.0.0/16 [{10.77.0.0/24 10.99.0.2}]}]"; got != want {
			return fmt.Errorf("routes %s, want %s", got, want)
		}
		return nil
	})

	r.kurmad.SetGeneration(api.Generation{Network: "spread", Generation: 1, State: api.StateRunning, Pods: 2})
	finalizers := func(want ...string) func() error {
		return func() error {
			ps := r.patches("spread", "")
			if len(ps) == 0 {
				return errors.New("no patch of the object")
			}
			got := fmt.Sprint(ps[len(ps)-1]["metadata"].(map[string]any)["finalizers"])
			if w := fmt.Sprint(want); got != w && !(len(want) == 0 && got == "[]") {
				return fmt.Errorf("finalizers %s, want %s", got, w)
			}
			return nil
		}
	}
	testutil.WaitFor(t, 10*time.Second, "n1's finalizer on spread", finalizers(NodeFinalizer("n1")))
	u = &unstructured.Unstructured{Object: spreadNetwork("7", map[string]any{"nodes": []any{other, mine}})}
	u.SetFinalizers([]string{NodeFinalizer("n1")})
	if _, err := r.dyn.Resource(NetworkGVR).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.kurmad.SetGeneration(api.Generation{Network: "spread", Generation: 1, State: api.StateRunning, Pods: 0})
	testutil.WaitFor(t, 10*time.Second, "n1's finalizer off spread", finalizers())

	// kurma uninstalled from the node: its routes go, and a later change
	// of the object routes nothing again.
	if err := r.w.Unroute(); err != nil {
		t.Fatal(err)
	}
	if got := rr.routes(); got != "[]" {
		t.Errorf("routes after Unroute: %s, want none", got)
	}
	other["address"] = "10.99.0.3"
	u = &unstructured.Unstructured{Object: spreadNetwork("8", map[string]any{"nodes": []any{other, mine}})}
	if _, err := r.dyn.Resource(NetworkGVR).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the update of n2's address seen", func() error {
		if o := r.w.object("spread"); o == nil || o.Metadata.ResourceVersion != "8" {
			return errors.New("not yet")
		}
		return nil
	})
	r.w.route()
	if got := rr.routes(); got != "[]" {
		t.Errorf("routes after Unroute and an update: %s, want none", got)
	}
}

// nadObject is a NetworkAttachmentDefinition with spec.config config.
func nadObject(ns, name, config string) map[string]any {
	spec := map[string]any{}
	if config != "" {
		spec["config"] = config
	}
	return map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": ns, "resourceVersion": "1"}, "spec": spec}
}

// TestWatcherServesNADs: once the NetworkAttachmentDefinition CRD is
// there, each NAD is a network of kurmad's config (its spec.config, the
// default image); a pod's references resolve as Multus resolves them (by
// name in the pod's namespace, by namespace/name from any, a kurma
// network by name); a NAD kurma cannot serve, or none, refuses the pod
// naming it; a pod's network-status names a NAD's network namespace/name.
func TestWatcherServesNADs(t *testing.T) {
	r := newWatcherRigWith(t, rigOptions{nadImage: "file:///plugin.aci", nads: []map[string]any{
		nadObject("team-a", "macvlan", `{"cniVersion": "0.3.1", "name": "macvlan-conf", "type": "bridge", "bridge": "kt9", "ipam": {"type": "host-local", "subnet": "10.88.0.0/16"}}`),
		nadObject("team-a", "empty", ""),
	}}, []string{"podnet"}, nil)
	testutil.WaitFor(t, 10*time.Second, "the NAD's network in kurmad's config", func() error {
		if cfg := r.config(t); !strings.Contains(cfg, `"name": "nad.team-a.macvlan"`) || !strings.Contains(cfg, `"image": "file:///plugin.aci"`) {
			return fmt.Errorf("config:\n%s", cfg)
		}
		return nil
	})
	for _, tt := range []struct {
		ns   string
		ref  kurmacni.NetworkRef
		want string // the network, or the refusal's reason and text
	}{
		{"team-a", kurmacni.NetworkRef{Name: "macvlan"}, "nad.team-a.macvlan"},
		{"team-b", kurmacni.NetworkRef{Namespace: "team-a", Name: "macvlan"}, "nad.team-a.macvlan"},
		{"team-b", kurmacni.NetworkRef{Name: "podnet"}, "podnet"},
		{"team-b", kurmacni.NetworkRef{Name: "macvlan"}, NotFoundReason + `: network "macvlan" (pod annotation k8s.v1.cni.cncf.io/networks): no NetworkAttachmentDefinition team-b/macvlan, and no kurma network "macvlan"`},
		{"team-a", kurmacni.NetworkRef{Name: "empty"}, UnavailableReason + ": " + `network "empty" (pod annotation k8s.v1.cni.cncf.io/networks): NetworkAttachmentDefinition team-a/empty has no spec.config`},
	} {
		names, denied := r.w.resolve(tt.ns, []kurmacni.NetworkRef{tt.ref})
		got := strings.Join(names, ",")
		if denied != nil {
			got = denied.EventReason() + ": " + denied.Error()
		}
		if !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s in namespace %s: %q, want %q", tt.ref, tt.ns, got, tt.want)
		}
	}
	if got := r.w.statusName("nad.team-a.macvlan"); got != "team-a/macvlan" {
		t.Errorf("the NAD's network in network-status: %q", got)
	}
}

// TestCreateMissing: the install's Networks that do not exist are
// created, those that do are left as they are, and a create the API
// server answers NotFound (the CRD, applied with kurma, not served yet)
// is tried again until it is served; the informer then holds them all.
func TestCreateMissing(t *testing.T) {
	existing := map[string]any{"apiVersion": NetworkGroup + "/" + NetworkVersion, "kind": "Network",
		"metadata": map[string]any{"name": "spread", "resourceVersion": "3", "generation": int64(1)},
		"spec":     map[string]any{"image": "file:///net.aci", "config": map[string]any{"type": "bridge", "bridge": "kt1"}}}
	r := newWatcherRigWith(t, rigOptions{}, []string{"podnet", "spread"}, nil, existing)
	var mu sync.Mutex
	var creates []string
	r.dyn.PrependReactor("create", NetworkResource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		name := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured).GetName()
		creates = append(creates, name)
		if len(creates) <= 2 {
			return true, nil, apierrors.NewNotFound(NetworkGVR.GroupResource(), "")
		}
		return false, nil, nil
	})
	file := filepath.Join(t.TempDir(), "networks.yaml")
	err := os.WriteFile(file, []byte(`apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: podnet}
spec:
  clusterNetwork: true
  image: file:///plugin.aci
  config: {type: bridge, bridge: kt0}
---
apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: spread}
spec:
  image: file:///other.aci
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.w.CreateMissing(context.Background(), file, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := fmt.Sprint(creates)
	mu.Unlock()
	if got != "[podnet podnet podnet]" {
		t.Errorf("creates %s: want podnet's, tried again twice, and none of spread, which exists", got)
	}
	if o := r.w.object("podnet"); o == nil || !o.Spec.ClusterNetwork {
		t.Errorf("the informer holds podnet as %+v", o)
	}
	if o := r.w.object("spread"); o == nil || o.Spec.Image != "file:///net.aci" {
		t.Errorf("spread, which existed, is %+v; want it unchanged", o)
	}
}

// plainNetwork is a Network of an image that needs no resolving, with
// more of its spec and metadata.
func plainNetwork(name string, spec, md map[string]any) map[string]any {
	m := map[string]any{"name": name, "resourceVersion": "1", "generation": int64(1)}
	maps.Copy(m, md)
	s := map[string]any{"image": "file:///net.aci", "config": map[string]any{"type": "bridge", "bridge": "kt-" + name}}
	maps.Copy(s, spec)
	return map[string]any{"apiVersion": NetworkGroup + "/" + NetworkVersion, "kind": "Network", "metadata": m, "spec": s}
}

// TestWatcherRefusesPullSecrets: a Network whose spec.imagePullSecret is
// missing, or holds no registry credentials kurma can read, stays out of
// kurmad's config and reports failed on this node naming the Secret; a
// Network beside them is applied as if they were not there.
func TestWatcherRefusesPullSecrets(t *testing.T) {
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: rigNamespace},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("not JSON")}}
	r := newWatcherRig(t, []string{"podnet", "fine"}, []runtime.Object{broken},
		plainNetwork("nosecret", map[string]any{"imagePullSecret": "missing"}, nil),
		plainNetwork("badsecret", map[string]any{"imagePullSecret": "broken"}, nil),
		plainNetwork("fine", nil, nil))
	for network, want := range map[string]string{
		"nosecret":  `spec.imagePullSecret kurma-system/missing: secrets "missing" not found`,
		"badsecret": "spec.imagePullSecret: Secret broken: .dockerconfigjson: invalid character",
	} {
		testutil.WaitFor(t, 10*time.Second, network+" failed on n1", func() error {
			if s, why := r.nodeState(network); s != api.StateFailed || !strings.HasPrefix(why, want) {
				return fmt.Errorf("%s's status on n1: %q %q, want failed: %s", network, s, why, want)
			}
			return nil
		})
	}
	testutil.WaitFor(t, 10*time.Second, "fine running on n1", func() error {
		if s, why := r.nodeState("fine"); s != api.StateRunning {
			return fmt.Errorf("fine's status on n1: %q %q, want running", s, why)
		}
		return nil
	})
	cfg := r.config(t)
	if !strings.Contains(cfg, `"name": "fine"`) || strings.Contains(cfg, "secret") {
		t.Errorf("kurmad's config, want fine and neither Network of a bad pull secret:\n%s", cfg)
	}
}

// TestWatcherReportsDeleting: a Network being deleted leaves kurmad's
// config (kurmad retires it) and reports deleting on this node, with the
// count of the pods here that still hold it.
func TestWatcherReportsDeleting(t *testing.T) {
	r := newWatcherRig(t, []string{"podnet", "going"}, nil,
		plainNetwork("going", nil, map[string]any{"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": []any{NodeFinalizer("n1")}}))
	r.kurmad.SetGeneration(api.Generation{Network: "going", Generation: 1, State: api.StateRunning, Pods: 2})
	testutil.WaitFor(t, 10*time.Second, "going deleting on n1", func() error {
		if s, why := r.nodeState("going"); s != StateDeleting || why != "2 pods on this node still hold it" {
			return fmt.Errorf("going's status on n1: %q %q, want deleting: 2 pods on this node still hold it", s, why)
		}
		return nil
	})
	if cfg := r.config(t); strings.Contains(cfg, `"going"`) {
		t.Errorf("a Network being deleted in kurmad's config:\n%s", cfg)
	}
}
