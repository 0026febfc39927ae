package k8snode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
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
	kurmad  *apitest.Backend
	dir     string
	mu      sync.Mutex
	reloads int
	applied []map[string]any // the status applies, oldest first
}

const rigNamespace = "kurma-system"

func newWatcherRig(t *testing.T, kurmadNets []string, objs []runtime.Object, networks ...map[string]any) *watcherRig {
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
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{NetworkGVR: "NetworkList"}, nets...)
	dyn.PrependReactor("patch", NetworkResource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		var body map[string]any
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			return true, nil, err
		}
		r.mu.Lock()
		r.applied = append(r.applied, body)
		r.mu.Unlock()
		return true, &unstructured.Unstructured{Object: body}, nil
	})
	log := logrus.New()
	log.SetOutput(io.Discard)
	w, err := newNetworkWatcher(r.cs, dyn, metafake.NewSimpleMetadataClient(metafake.NewTestScheme()), WatcherOptions{
		NodeName: "n1", Namespace: rigNamespace, Config: filepath.Join(r.dir, "kurmad.json"), BaseDir: r.dir,
		Kurmad: api.NewClient(sock), Log: log})
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
	cfg, err := w.Render(ctx, []byte(mergeBase))
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
