package k8snode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kurma-project/kurma/pkg/api"
)

// NetworkGVR is the Network resource.
var NetworkGVR = schema.GroupVersionResource{Group: NetworkGroup, Version: NetworkVersion, Resource: NetworkResource}

// NetworkWatcher keeps this node's kurmad in step with the cluster's
// Network objects: an informer (a watch, and a full resync every Resync)
// delivers every change, after which the watcher writes kurmad's config
// (the template's networks and the objects', see Merge) and asks kurmad
// to reload it, as `kurmactl reload` does: a changed image or config
// starts a new generation, attached pods keep theirs, a removed network
// retires once its last pod is gone. It reports each Network's state on
// this node in the object's status (NodeStatus), only when it changed,
// and answers kurma-cni's questions (agent.go).
type NetworkWatcher struct {
	WatcherOptions

	dyn      dynamic.Interface
	cs       kubernetes.Interface
	networks cache.SharedIndexInformer
	spaces   cache.SharedIndexInformer
	nodes    cache.SharedIndexInformer // the Nodes' metadata: whose status entries to prune
	// refs are the metadata of kurma's namespace's Secrets and
	// ConfigMaps: a change of one a Network names (pull secret, trust)
	// applies at once, not at the next resync.
	refs    [2]cache.SharedIndexInformer
	changed chan struct{}

	mu       sync.Mutex
	base     []byte                // the rendered template
	written  []byte                // the config last written and reloaded
	auth     []byte                // the auth file last written
	dirty    bool                  // the last reload failed: try again
	retryAt  time.Time             // when a failed image resolution is due again (zero: none)
	refused  map[string]NodeStatus // objects kurmad does not get, by name
	trust    map[string]TrustFile  // the objects' trust as last merged, by name
	reported map[string]NodeStatus // what this node last wrote, by name
	reports  *reportQueue
	resolver *Resolver
	// retryResolve is when a failed resolution of a Network's image is
	// tried again, and notes why it failed, by name.
	retryResolve map[string]time.Time
	resolveErr   map[string]string
	notes        map[string]string
}

// WatcherOptions are a NetworkWatcher's settings.
type WatcherOptions struct {
	NodeName string
	// Namespace is kurma's: pull secrets are read from it.
	Namespace string
	// Config is kurmad's config file; AuthFile the registry credentials
	// file kurmad reads (REGISTRY_AUTH_FILE).
	Config, AuthFile string
	// BaseDir is where relative paths of the config are resolved.
	BaseDir string
	Kurmad  *api.Client
	// Resync is the informers' full resync; 0 → 10 minutes.
	Resync time.Duration
	// StatusInterval is how often kurmad's generations are read for the
	// status; 0 → 2 s.
	StatusInterval time.Duration
	// CertsDir is kurmad's certs.d, the registries' TLS roots.
	CertsDir string
	Log      logrus.FieldLogger
}

// NewNetworkWatcher connects to the API server with rc and sets up the
// informers (Networks, Namespaces); Start runs them.
func NewNetworkWatcher(rc *rest.Config, o WatcherOptions) (*NetworkWatcher, error) {
	w := &NetworkWatcher{WatcherOptions: o}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if w.Resync == 0 {
		w.Resync = 10 * time.Minute
	}
	if w.StatusInterval == 0 {
		w.StatusInterval = 2 * time.Second
	}
	w.cs, w.dyn = cs, dyn
	w.changed = make(chan struct{}, 1)
	w.refused, w.reported = map[string]NodeStatus{}, map[string]NodeStatus{}
	w.retryResolve, w.resolveErr, w.notes = map[string]time.Time{}, map[string]string{}, map[string]string{}
	w.resolver = &Resolver{CertsDir: w.CertsDir}
	w.networks = dynamicinformer.NewDynamicSharedInformerFactory(dyn, w.Resync).ForResource(NetworkGVR).Informer()
	w.spaces = informers.NewSharedInformerFactory(cs, w.Resync).Core().V1().Namespaces().Informer()
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	w.nodes = metadatainformer.NewSharedInformerFactory(mc, w.Resync).ForResource(corev1.SchemeGroupVersion.WithResource("nodes")).Informer()
	poke := func() {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	for i, kind := range []string{"secrets", "configmaps"} {
		w.refs[i] = metadatainformer.NewFilteredSharedInformerFactory(mc, w.Resync, w.Namespace, nil).
			ForResource(corev1.SchemeGroupVersion.WithResource(kind)).Informer()
		secret := kind == "secrets"
		named := func(o any) {
			if m, ok := o.(metav1.Object); ok && w.names(secret, m.GetName()) {
				poke()
			}
		}
		if _, err := w.refs[i].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: named, UpdateFunc: func(_, n any) { named(n) },
			DeleteFunc: func(o any) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				named(o)
			},
		}); err != nil {
			return nil, err
		}
	}
	_, err = w.networks.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() }, DeleteFunc: func(any) { poke() },
		UpdateFunc: func(o, n any) {
			// A status write (this node's or another's) changes nothing
			// kurmad reads but status.resolved: the digest another node
			// resolved, which a node that lost that race waits for; a
			// resync delivers the same object again, which is the
			// periodic re-check.
			if specOf(o) != specOf(n) || resolvedOf(o) != resolvedOf(n) ||
				o.(*unstructured.Unstructured).GetResourceVersion() == n.(*unstructured.Unstructured).GetResourceVersion() {
				poke()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	w.reports = newReportQueue(cs, w.Log)
	return w, nil
}

// names: a Network names the Secret (secret) or ConfigMap called name,
// as its pull secret or its trust.
func (w *NetworkWatcher) names(secret bool, name string) bool {
	for _, o := range w.objects() {
		t := o.Spec.Trust
		switch {
		case secret && o.Spec.ImagePullSecret == name,
			t != nil && secret && t.SecretRef != nil && t.SecretRef.Name == name,
			t != nil && !secret && t.ConfigMapRef != nil && t.ConfigMapRef.Name == name:
			return true
		}
	}
	return false
}

// resolvedOf is an object's status.resolved as JSON.
func resolvedOf(o any) string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	r, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "resolved")
	b, _ := json.Marshal(r)
	return string(b)
}

// specOf is an object's spec as JSON, to tell a spec change from a
// status write.
func specOf(o any) string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	b, _ := json.Marshal(u.Object["spec"])
	return string(b)
}

// Start runs the informers and waits up to timeout for their first list.
// A cluster without the Network CRD (or kurma without access to it) is
// logged and the template's networks alone run; the informer keeps
// trying, and objects apply once it lists them.
func (w *NetworkWatcher) Start(ctx context.Context, timeout time.Duration) {
	go w.networks.Run(ctx.Done())
	go w.spaces.Run(ctx.Done())
	go w.nodes.Run(ctx.Done())
	for _, r := range w.refs {
		go r.Run(ctx.Done())
	}
	go w.reports.run(ctx)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), w.networks.HasSynced, w.spaces.HasSynced) {
		w.Log.WithField("timeout", timeout).Warn("the Network objects could not be listed yet (is the networks.kurma.dev CRD installed?): starting with the ConfigMap's networks")
	}
}

// objects are the Network objects in the informer's cache, by name.
func (w *NetworkWatcher) objects() []*NetworkObject {
	var out []*NetworkObject
	for _, o := range w.networks.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		b, err := json.Marshal(u.Object)
		if err != nil {
			continue
		}
		var n NetworkObject
		if err := json.Unmarshal(b, &n); err != nil {
			w.Log.WithError(err).WithField("network", u.GetName()).Warn("a Network object kurma cannot read")
			continue
		}
		out = append(out, &n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Metadata.Name < out[j].Metadata.Name })
	return out
}

// object is the Network called name, nil when there is none.
func (w *NetworkWatcher) object(name string) *NetworkObject {
	for _, o := range w.objects() {
		if o.Metadata.Name == name {
			return o
		}
	}
	return nil
}

// Render is kurmad's config from base (the rendered template) and the
// Network objects known now; it also writes the registry credentials of
// their pull secrets. For boot: kurmad starts with them.
func (w *NetworkWatcher) Render(ctx context.Context, base []byte) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.base = base
	cfg, err := w.merge(ctx)
	if err == nil {
		w.written = cfg
	}
	return cfg, err
}

// merge is Render under w.mu.
func (w *NetworkWatcher) merge(ctx context.Context) ([]byte, error) {
	objs := w.objects()
	secrets := map[string][]byte{}
	refused := map[string]NodeStatus{}
	for _, o := range objs {
		if s := o.Spec.ImagePullSecret; s != "" {
			if _, ok := secrets[s]; ok {
				continue
			}
			b, err := w.pullSecret(ctx, s)
			if err != nil {
				refused[o.Metadata.Name] = NodeStatus{State: api.StateFailed, Reason: err.Error()}
				continue
			}
			secrets[s] = b
		}
	}
	auth, badSecrets := MergeAuths(secrets)
	images := map[string]string{}
	for _, o := range objs {
		if err := badSecrets[o.Spec.ImagePullSecret]; err != nil {
			refused[o.Metadata.Name] = NodeStatus{State: api.StateFailed, Reason: "spec.imagePullSecret: " + err.Error()}
		}
		if _, ok := refused[o.Metadata.Name]; ok {
			continue
		}
		image, st := w.image(ctx, o, secrets[o.Spec.ImagePullSecret])
		if image != "" {
			images[o.Metadata.Name] = image
		} else {
			refused[o.Metadata.Name] = st
		}
	}
	w.retryAt = time.Time{}
	for k, t := range w.retryResolve {
		if name, _, _ := strings.Cut(k, "\x00"); w.object(name) == nil {
			delete(w.retryResolve, k)
		} else if w.retryAt.IsZero() || t.Before(w.retryAt) {
			w.retryAt = t
		}
	}
	trust, badTrust := w.trustFiles(ctx, objs)
	w.trust = trust
	for name, err := range badTrust {
		delete(images, name)
		if _, ok := refused[name]; !ok {
			refused[name] = NodeStatus{State: api.StateFailed, Reason: err.Error()}
		}
	}
	m, err := Merge(w.base, objs, images, trust, w.BaseDir)
	if err != nil {
		return nil, err
	}
	for name, st := range refused {
		if cur, ok := m.Refused[name]; !ok || cur.State == StatePending {
			m.Refused[name] = st
		}
	}
	w.refused = m.Refused
	if w.AuthFile != "" && !bytes.Equal(auth, w.auth) {
		if err := writeAtomic(w.AuthFile, bytes.NewReader(auth), 0o600); err != nil {
			return nil, err
		}
		w.auth = auth
	}
	return m.Config, nil
}

// image is the image kurmad runs for o: spec.image, or, for a docker://
// image by tag, the digest it was resolved to (the object's
// status.resolved; the first node to see a new spec.image resolves it and
// writes it there, and the others take it from there). While a new
// spec.image cannot be resolved, the last one resolved keeps running and
// the node's status entry says why; with none, "" and the reason.
func (w *NetworkWatcher) image(ctx context.Context, o *NetworkObject, auths []byte) (string, NodeStatus) {
	name, spec, res := o.Metadata.Name, o.Spec.Image, o.Status.Resolved
	delete(w.notes, name)
	if res != nil && res.From == spec {
		return res.Image, NodeStatus{}
	}
	if !NeedsResolving(spec) {
		return spec, NodeStatus{}
	}
	fail := func(why string) (string, NodeStatus) {
		if res != nil {
			w.notes[name] = fmt.Sprintf("still runs %s: %s", res.Image, why)
			return res.Image, NodeStatus{}
		}
		return "", NodeStatus{State: api.StateFailed, Reason: why}
	}
	// A failed resolution is tried again after a while, or at once when
	// the image or its credentials changed.
	key := name + "\x00" + spec + "\x00" + string(auths)
	if t, ok := w.retryResolve[key]; ok && time.Now().Before(t) {
		return fail(w.resolveErr[name])
	}
	digest, err := w.resolver.Resolve(ctx, spec, auths)
	if err != nil {
		for k := range w.retryResolve {
			if strings.HasPrefix(k, name+"\x00") {
				delete(w.retryResolve, k)
			}
		}
		w.retryResolve[key] = time.Now().Add(30 * time.Second)
		w.resolveErr[name] = err.Error()
		w.Log.WithError(err).WithField("network", name).Warn("resolving the Network's image")
		return fail(err.Error())
	}
	delete(w.retryResolve, key)
	delete(w.resolveErr, name)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": o.Metadata.ResourceVersion},
		"status": map[string]any{"resolved": ResolvedImage{From: spec, Image: digest}}})
	_, err = w.dyn.Resource(NetworkGVR).Patch(ctx, name, ktypes.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kurma-node/" + w.NodeName}, "status")
	switch {
	case apierrors.IsConflict(err):
		// Another node resolved it first: its digest arrives with the
		// object's update, and every node runs that one; until then, what
		// ran before.
		if res != nil {
			return res.Image, NodeStatus{}
		}
		return "", NodeStatus{State: StatePending, Reason: "waiting for the image's digest another node resolved"}
	case err != nil:
		w.Log.WithError(err).WithField("network", name).Warn("recording the Network's resolved image in its status")
	default:
		w.Log.WithFields(logrus.Fields{"network": name, "image": spec, "resolved": digest}).Info("resolved the Network's image to a digest")
	}
	return digest, NodeStatus{}
}

// pullSecret is the .dockerconfigjson of Secret name in kurma's namespace.
func (w *NetworkWatcher) pullSecret(ctx context.Context, name string) ([]byte, error) {
	s, err := w.cs.CoreV1().Secrets(w.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("spec.imagePullSecret %s/%s: %w", w.Namespace, name, err)
	}
	b, ok := s.Data[corev1.DockerConfigJsonKey]
	if !ok {
		return nil, fmt.Errorf("spec.imagePullSecret %s/%s: no %s key (want a Secret of type %s)", w.Namespace, name, corev1.DockerConfigJsonKey, corev1.SecretTypeDockerConfigJson)
	}
	return b, nil
}

// Run applies every change of the Network objects to kurmad until ctx
// ends, and keeps their status on this node current.
func (w *NetworkWatcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.StatusInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
			w.sync(ctx)
		case <-tick.C:
			w.mu.Lock()
			again := w.dirty || (!w.retryAt.IsZero() && time.Now().After(w.retryAt))
			w.mu.Unlock()
			if again {
				w.sync(ctx)
			}
			w.report(ctx)
		}
	}
}

// sync writes kurmad's config if the objects changed it and reloads
// kurmad; a reload that fails is tried again at the next tick.
func (w *NetworkWatcher) sync(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.base == nil {
		return
	}
	before := w.trust
	cfg, err := w.merge(ctx)
	if err != nil {
		w.Log.WithError(err).Error("merging the Network objects into kurmad's config")
		w.dirty = true
		return
	}
	if bytes.Equal(cfg, w.written) && !w.dirty {
		return
	}
	if err := writeAtomic(w.Config, bytes.NewReader(cfg), 0o600); err != nil {
		w.Log.WithError(err).Error("writing kurmad's config")
		w.dirty = true
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := w.Kurmad.Reload(rctx)
	if err != nil {
		w.Log.WithError(err).Warn("kurmad's reload failed; trying again")
		w.dirty = true
		return
	}
	w.written, w.dirty = cfg, false
	w.Log.WithFields(logrus.Fields{"added": res.Added, "replaced": res.Replaced, "retired": res.Retired,
		"updated": res.Updated}).Info("the Network objects changed: kurmad reloaded")
	// A network whose trust changed (its Secret fixed) fetches again now,
	// not after the backoff of its failed fetches.
	for name, tf := range w.trust {
		if old, ok := before[name]; ok && old.Path != tf.Path {
			if _, err := w.Kurmad.RetryNetwork(rctx, name); err != nil {
				w.Log.WithError(err).WithField("network", name).Warn("retrying the network with its new trust")
			}
		}
	}
}

// report writes this node's entry in each Network's status when it
// changed (see nodeStatus), and the object's summary when this node is
// the one to (see summary).
func (w *NetworkWatcher) report(ctx context.Context) {
	gens, err := w.Kurmad.Networks(ctx)
	if err != nil {
		return // kurmad restarting: the next tick
	}
	w.mu.Lock()
	refused := w.refused
	w.mu.Unlock()
	for _, o := range w.objects() {
		name := o.Metadata.Name
		if w.prune(ctx, o) {
			continue // the next tick reads the object as written
		}
		st, ok := refused[name]
		if !ok {
			st = nodeStatus(gens, name)
		}
		if note := w.notes[name]; note != "" {
			st.Reason = strings.TrimPrefix(st.Reason+"; "+note, "; ")
		}
		st.Node, st.ObservedGeneration = w.NodeName, o.Metadata.Generation
		cur, had := w.reported[name]
		if !had {
			if i := slices.IndexFunc(o.Status.Nodes, func(n NodeStatus) bool { return n.Node == w.NodeName }); i >= 0 {
				cur, had = o.Status.Nodes[i], true
			}
		}
		if had && sameStatus(cur, st) {
			w.reported[name] = cur
			w.summary(ctx, o)
			continue
		}
		st.LastTransitionTime = metav1.Now()
		if err := w.applyStatus(ctx, name, "kurma-node/"+w.NodeName, map[string]any{"nodes": []NodeStatus{st}}); err != nil {
			w.Log.WithError(err).WithField("network", name).Warn("writing the Network's status for this node")
			continue
		}
		w.reported[name] = st
	}
	for name := range w.reported {
		if w.object(name) == nil {
			delete(w.reported, name)
		}
	}
}

// prune removes from o's status the entries of deleted Nodes, with the
// counts, in one write, when this node is the one to (LastWriter of the
// entries left; any node when none is left): true when it wrote. A Node
// missing from the informer's cache is asked for before its entry goes,
// so that a node joining is not pruned before the cache sees it.
func (w *NetworkWatcher) prune(ctx context.Context, o *NetworkObject) bool {
	if !w.nodes.HasSynced() {
		return false
	}
	deleted := func(node string) bool {
		if node == w.NodeName {
			return false
		}
		if _, ok, _ := w.nodes.GetStore().GetByKey(node); ok {
			return false
		}
		_, err := w.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	missing := func(node string) bool {
		_, ok, _ := w.nodes.GetStore().GetByKey(node)
		return !ok && node != w.NodeName
	}
	// Elect on the cache alone, then confirm with the API server: only
	// the elected node asks.
	left, gone := Prune(o.Status, missing)
	if len(gone) == 0 {
		return false
	}
	if last := LastWriter(left.Nodes); last != w.NodeName && last != "" {
		return false
	}
	left, gone = Prune(o.Status, deleted)
	if len(gone) == 0 {
		return false
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": o.Metadata.ResourceVersion},
		"status": map[string]any{"nodes": left.Nodes, "running": left.Running, "failing": left.Failing}})
	if err != nil {
		return false
	}
	log := w.Log.WithFields(logrus.Fields{"network": o.Metadata.Name, "nodes": gone})
	_, err = w.dyn.Resource(NetworkGVR).Patch(ctx, o.Metadata.Name, ktypes.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "kurma-node-summary"}, "status")
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return false // changed or deleted meanwhile: the next tick sees it
	case err != nil:
		log.WithError(err).Warn("removing deleted nodes from the Network's status")
		return false
	}
	log.Info("removed deleted nodes from the Network's status")
	return true
}

// sameStatus: a and b say the same, whenever they were written.
func sameStatus(a, b NodeStatus) bool {
	a.LastTransitionTime, b.LastTransitionTime = metav1.Time{}, metav1.Time{}
	return a == b
}

// nodeStatus is network name's state in kurmad's generations: the newest
// generation that serves new pods or is on its way to.
func nodeStatus(gens []api.Generation, name string) NodeStatus {
	var best *api.Generation
	for i, g := range gens {
		if g.Network != name || g.State == api.StateRetiring || g.State == api.StateStopped {
			continue
		}
		if best == nil || g.Generation > best.Generation {
			best = &gens[i]
		}
	}
	if best == nil {
		return NodeStatus{State: StatePending, Reason: "kurmad has not taken the network yet"}
	}
	return NodeStatus{State: best.State, Generation: best.Generation, Image: best.Image, Reason: best.Reason}
}

// summary writes status.running and .failing when they do not count
// status.nodes and this node's entry changed last (ties: the first name):
// one node writes them, the one whose write made them stale.
func (w *NetworkWatcher) summary(ctx context.Context, o *NetworkObject) {
	if LastWriter(o.Status.Nodes) != w.NodeName {
		return
	}
	running, failing := Counts(o.Status.Nodes)
	if o.Status.Running != nil && *o.Status.Running == running && o.Status.Failing != nil && *o.Status.Failing == failing {
		return
	}
	if err := w.applyStatus(ctx, o.Metadata.Name, "kurma-node-summary", map[string]any{"running": running, "failing": failing}); err != nil {
		w.Log.WithError(err).WithField("network", o.Metadata.Name).Warn("writing the Network's node counts")
	}
}

// applyStatus applies status, as field manager manager, to Network name
// (server-side apply: each node owns its entry of status.nodes).
func (w *NetworkWatcher) applyStatus(ctx context.Context, name, manager string, status map[string]any) error {
	b, err := json.Marshal(map[string]any{"apiVersion": NetworkGroup + "/" + NetworkVersion, "kind": "Network",
		"metadata": map[string]any{"name": name}, "status": status})
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return err
	}
	_, err = w.dyn.Resource(NetworkGVR).ApplyStatus(ctx, name, u, metav1.ApplyOptions{FieldManager: manager, Force: true})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	return err
}

// access decides whether a pod of namespace may join networks: an error
// naming the first network that refuses it and its rule.
func (w *NetworkWatcher) access(ctx context.Context, namespace string, networks []string) (*AccessDenied, error) {
	var nsLabels map[string]string
	loaded := false
	for _, name := range networks {
		o := w.object(name)
		if o == nil {
			continue // a network of the ConfigMap's, or none: kurmad answers
		}
		if !loaded {
			l, err := w.namespaceLabels(ctx, namespace)
			if err != nil {
				return nil, err
			}
			nsLabels, loaded = l, true
		}
		ok, rule, err := o.Admits(nsLabels)
		if err != nil {
			return nil, err
		}
		if !ok {
			return &AccessDenied{Network: name, Namespace: namespace, Rule: rule}, nil
		}
	}
	return nil, nil
}

func (w *NetworkWatcher) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	if o, ok, _ := w.spaces.GetStore().GetByKey(name); ok {
		return o.(*corev1.Namespace).Labels, nil
	}
	ns, err := w.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("namespace %q: %w", name, err)
	}
	return ns.Labels, nil
}

// AccessDenied is a pod refused by a Network: its namespace does not
// match the rule.
type AccessDenied struct {
	Network, Namespace, Rule string
}

func (e *AccessDenied) Error() string {
	return fmt.Sprintf("network %q does not admit pods of namespace %q: the namespace's labels do not match its %s", e.Network, e.Namespace, e.Rule)
}

// event records a Warning Event on a pod.
func (w *NetworkWatcher) event(ctx context.Context, namespace, pod, uid, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod + ".", Namespace: namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: pod, UID: ktypes.UID(uid)},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kurma-node", Host: w.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "kurma.dev/kurma-node", ReportingInstance: w.NodeName,
	}
	if _, err := w.cs.CoreV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		w.Log.WithError(err).WithField("pod", namespace+"/"+pod).Warn("recording an Event on the pod")
	}
}
