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
	"k8s.io/apimachinery/pkg/api/meta"
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
	// secrets and configMaps are kurma's namespace's, without their data.
	secrets, configMaps cache.SharedIndexInformer
	nodes               cache.SharedIndexInformer // the Nodes' metadata: whose status entries to prune
	changed             chan struct{}             // the objects changed: sync, then report
	restate             chan struct{}             // kurmad's generations or the objects' status changed: report

	gens     []api.Generation // kurmad's generations, as last streamed (follow)
	haveGens bool

	mu       sync.Mutex
	base     []byte    // the rendered template
	written  []byte    // the config last written and reloaded
	auth     []byte    // the auth file last written
	dirty    bool      // the last reload failed: try again
	reloadAt time.Time // when a failed reload is tried again (zero: none)
	failures int       // reloads failed in a row: its backoff
	retryAt  time.Time // when a failed image resolution is due again (zero: none)
	// reportAt is when a failed status write is tried again (zero: none).
	reportAt       time.Time
	reportFailures int
	refused        map[string]NodeStatus // objects kurmad does not get, by name
	trust          map[string]TrustFile  // the objects' trust as last merged, by name
	reported       map[string]NodeStatus // what this node last wrote, by name
	reports        *reportQueue
	resolver       *Resolver
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
	// Resync is the informers' full resync; 0 → 10 minutes. It is the
	// only timer: kurmad's generations are followed as they change
	// (GET /v1/networks?wait=R), the objects as the informers deliver them.
	Resync time.Duration
	// CertsDir is kurmad's certs.d, the registries' TLS roots.
	CertsDir string
	// Credentials, when set, is given the networks with
	// kubernetes_credentials of each config before kurmad reloads it, so
	// that a network added with them finds its token.
	Credentials *Credentials
	Log         logrus.FieldLogger
}

// NewNetworkWatcher connects to the API server with rc and sets up the
// informers (Networks, Namespaces); Start runs them.
func NewNetworkWatcher(rc *rest.Config, o WatcherOptions) (*NetworkWatcher, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return newNetworkWatcher(cs, dyn, mc, o)
}

// newNetworkWatcher is NewNetworkWatcher over these clients.
func newNetworkWatcher(cs kubernetes.Interface, dyn dynamic.Interface, mc metadata.Interface, o WatcherOptions) (*NetworkWatcher, error) {
	w := &NetworkWatcher{WatcherOptions: o}
	if w.Resync == 0 {
		w.Resync = 10 * time.Minute
	}
	w.cs, w.dyn = cs, dyn
	w.changed, w.restate = make(chan struct{}, 1), make(chan struct{}, 1)
	w.refused, w.reported = map[string]NodeStatus{}, map[string]NodeStatus{}
	w.retryResolve, w.resolveErr, w.notes = map[string]time.Time{}, map[string]string{}, map[string]string{}
	w.resolver = &Resolver{CertsDir: w.CertsDir}
	w.networks = dynamicinformer.NewDynamicSharedInformerFactory(dyn, w.Resync).ForResource(NetworkGVR).Informer()
	w.spaces = informers.NewSharedInformerFactory(cs, w.Resync).Core().V1().Namespaces().Informer()
	// The Secrets and ConfigMaps of kurma's namespace, kept without their
	// data (read when used): a change of one a Network names (spec.trust,
	// spec.imagePullSecret) applies at once.
	mine := informers.NewSharedInformerFactoryWithOptions(cs, w.Resync, informers.WithNamespace(w.Namespace), informers.WithTransform(withoutData))
	w.secrets, w.configMaps = mine.Core().V1().Secrets().Informer(), mine.Core().V1().ConfigMaps().Informer()
	for _, inf := range []cache.SharedIndexInformer{w.secrets, w.configMaps} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { w.sourceChanged(o) }, DeleteFunc: func(o any) { w.sourceChanged(o) },
			UpdateFunc: func(o, n any) {
				if metaOf(o).GetResourceVersion() != metaOf(n).GetResourceVersion() {
					w.sourceChanged(n)
				}
			},
		}); err != nil {
			return nil, err
		}
	}
	var err error
	w.nodes = metadatainformer.NewSharedInformerFactory(mc, w.Resync).ForResource(corev1.SchemeGroupVersion.WithResource("nodes")).Informer()
	_, err = w.networks.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke(w.changed) }, DeleteFunc: func(any) { poke(w.changed) },
		UpdateFunc: func(o, n any) {
			// A status write (this node's or another's) changes nothing
			// kurmad reads, only what this node may write (the counts, a
			// deleted node's entry); a resync delivers the same object
			// again, which is the periodic re-check.
			// status.resolved, the digest another node resolved, is
			// read: a node that lost that race waits for it.
			if specOf(o) != specOf(n) || resolvedOf(o) != resolvedOf(n) ||
				o.(*unstructured.Unstructured).GetResourceVersion() == n.(*unstructured.Unstructured).GetResourceVersion() {
				poke(w.changed)
			} else {
				poke(w.restate)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	// A deleted Node's entries leave the status (prune).
	if _, err = w.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { poke(w.restate) }}); err != nil {
		return nil, err
	}
	w.reports = newReportQueue(cs, w.Log)
	return w, nil
}

// withoutData drops a Secret's or ConfigMap's data: the informers keep
// only what tells a change; the data is read when used.
func withoutData(o any) (any, error) {
	switch v := o.(type) {
	case *corev1.Secret:
		v.Data, v.StringData = nil, nil
	case *corev1.ConfigMap:
		v.Data, v.BinaryData = nil, nil
	}
	return o, nil
}

// metaOf is an informer's object's metadata (a deleted one's too).
func metaOf(o any) metav1.Object {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return &metav1.ObjectMeta{}
	}
	return m
}

// sourceChanged: Secret or ConfigMap o of kurma's namespace was added,
// changed or deleted; when a Network names it, the objects are applied
// again (sync), as for a change of the Network.
func (w *NetworkWatcher) sourceChanged(o any) {
	kind := "ConfigMap"
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if _, ok := o.(*corev1.Secret); ok {
		kind = "Secret"
	}
	name := metaOf(o).GetName()
	for _, n := range w.objects() {
		if n.names(kind, name) {
			poke(w.changed)
			return
		}
	}
}

// names: o's spec.trust or spec.imagePullSecret names the Secret or
// ConfigMap (kind) called name in kurma's namespace.
func (o *NetworkObject) names(kind, name string) bool {
	if kind == "Secret" && o.Spec.ImagePullSecret == name {
		return true
	}
	if o.Spec.Trust == nil {
		return false
	}
	k, n, _, err := o.Spec.Trust.source()
	return err == nil && k == kind && n == name
}

// poke wakes the loop that reads ch, unless it has a wake-up pending.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
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
	go w.secrets.Run(ctx.Done())
	go w.configMaps.Run(ctx.Done())
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
	repos := map[string][]string{}
	refused := map[string]NodeStatus{}
	for _, o := range objs {
		if s := o.Spec.ImagePullSecret; s != "" {
			if r := RepositoryOf(o.Spec.Image); r != "" && !slices.Contains(repos[s], r) {
				repos[s] = append(repos[s], r)
			}
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
	auth, badSecrets := MergeAuths(secrets, repos)
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
// ends, and keeps their status on this node current. It has no timer of
// its own but for what failed: kurmad's generations come as they change
// (follow), the objects as the informers deliver them; a failed reload
// is tried again with backoff (and at once when kurmad comes back), a
// failed image resolution when its backoff ends.
func (w *NetworkWatcher) Run(ctx context.Context) {
	go FollowNetworks(ctx, w.Kurmad, w.Log, func(gens []api.Generation) {
		w.mu.Lock()
		w.gens, w.haveGens = gens, true
		dirty := w.dirty
		w.mu.Unlock()
		poke(w.restate)
		if dirty {
			poke(w.changed) // kurmad back (restarted): reload now
		}
	})
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
			w.sync(ctx)
		case <-retry.C:
			w.sync(ctx)
		case <-w.restate:
		}
		w.report(ctx)
		if due := w.due(); !due.IsZero() {
			retry.Reset(max(time.Until(due), 0))
		} else {
			retry.Stop()
		}
	}
}

// due is when sync and report must run again though nothing changed: a
// failed reload's, image resolution's or status write's next try; zero
// for none.
func (w *NetworkWatcher) due() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	due := time.Time{}
	for _, t := range []time.Time{w.retryAt, w.reportAt} {
		if !t.IsZero() && (due.IsZero() || t.Before(due)) {
			due = t
		}
	}
	if w.dirty && (due.IsZero() || w.reloadAt.Before(due)) {
		due = w.reloadAt
	}
	return due
}

// reloadFailed marks the config for another reload, after a backoff of
// 1 s doubling to a minute; w.mu is held.
func (w *NetworkWatcher) reloadFailed() {
	w.dirty = true
	w.reloadAt = time.Now().Add(min(time.Second<<min(w.failures, 6), time.Minute))
	w.failures++
}

// FollowNetworks calls changed with kurmad's generations at once and
// at each change of their states (GET /v1/networks?wait=R), until ctx
// ends. While kurmad cannot be reached (starting, restarting) it
// reconnects, after 50 ms doubling to 2 s; a restarted kurmad's
// generations are delivered at once (its revisions are its own).
func FollowNetworks(ctx context.Context, c *api.Client, log logrus.FieldLogger, changed func([]api.Generation)) {
	rev, lastErr := "", ""
	const first, most = 50 * time.Millisecond, 2 * time.Second
	backoff := first
	for ctx.Err() == nil {
		gens, r, err := c.WaitNetworks(ctx, rev)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if err.Error() != lastErr {
				lastErr = err.Error()
				log.WithError(err).Debug("following kurmad's networks: reconnecting")
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, most)
			continue
		}
		backoff, lastErr = first, ""
		if r == rev && rev != "" {
			continue // kurmad's longest wait ended: nothing changed
		}
		rev = r
		changed(gens)
	}
}

// sync writes kurmad's config if the objects changed it and reloads
// kurmad; a reload that fails is tried again (reloadFailed).
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
		w.reloadFailed()
		return
	}
	if bytes.Equal(cfg, w.written) && !w.dirty {
		return
	}
	if w.Credentials != nil {
		if names, err := CredentialedNetworks(cfg); err == nil {
			w.Credentials.Sync(ctx, names)
		}
	}
	if err := writeAtomic(w.Config, bytes.NewReader(cfg), 0o600); err != nil {
		w.Log.WithError(err).Error("writing kurmad's config")
		w.reloadFailed()
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := w.Kurmad.Reload(rctx)
	if err != nil {
		w.Log.WithError(err).Warn("kurmad's reload failed; trying again")
		w.reloadFailed()
		return
	}
	w.written, w.dirty, w.failures = cfg, false, 0
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
	w.mu.Lock()
	refused, gens, have := w.refused, w.gens, w.haveGens
	w.mu.Unlock()
	if !have {
		return // kurmad not reached yet: its first answer reports
	}
	failed := false
	defer func() {
		// A failed write is tried again after a backoff (1 s doubling to
		// a minute), not only at the next change.
		w.mu.Lock()
		defer w.mu.Unlock()
		if !failed {
			w.reportAt, w.reportFailures = time.Time{}, 0
			return
		}
		w.reportAt = time.Now().Add(min(time.Second<<min(w.reportFailures, 6), time.Minute))
		w.reportFailures++
	}()
	for _, o := range w.objects() {
		name := o.Metadata.Name
		if w.prune(ctx, o) {
			continue // its update (restate) reports on the object as written
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
			failed = true
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
		return false // changed or deleted meanwhile: its update reports again
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
