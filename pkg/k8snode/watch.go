package k8snode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
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

	input     Input                // this node, for the Networks' placeholders
	baseNames []string             // the template's networks
	routes    []SpanRoutes         // the spanning networks' routes as last made
	routeErr  error                // why they could not be made
	routed    bool                 // Route ran once (it removes what an earlier kurma-node left)
	unrouted  bool                 // Unroute ran: kurma is being uninstalled, nothing is routed again
	accessed  map[string]time.Time // when a pod was last let into each Network
	holdAt    time.Time            // when a finalizer held for an access is looked at again
	// nads are the NetworkAttachmentDefinitions as last merged, by
	// namespace/name; nadInformer runs once their CRD is found (crds).
	nads        map[string]*nad
	nadInformer cache.SharedIndexInformer
	crds        cache.SharedIndexInformer
	ctx         context.Context // Start's, for informers started later
	mc          metadata.Interface
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
	// Router makes the routes of the Networks that kurma spans across
	// the nodes (spec.scope cluster with spec.subnet); nil: none are made
	// (such a Network then reaches no other node).
	Router Router
	// NADImage is the plugin image serving Multus'
	// NetworkAttachmentDefinitions that name none (NADImageAnnotation);
	// "": kurma does not serve them.
	NADImage string
	Log      logrus.FieldLogger
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
	w.accessed, w.nads, w.mc = map[string]time.Time{}, map[string]*nad{}, mc
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
			// So are the blocks of a spanning Network (the node's own
			// stands in its config, the others' are routed) and the
			// start of its deletion (kurmad takes no new pod into it).
			if specOf(o) != specOf(n) || resolvedOf(o) != resolvedOf(n) || blocksOf(o) != blocksOf(n) ||
				o.(*unstructured.Unstructured).GetDeletionTimestamp() != nil != (n.(*unstructured.Unstructured).GetDeletionTimestamp() != nil) ||
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
	// The NetworkAttachmentDefinition CRD, by name: once it is there,
	// its objects are served (startNADs).
	w.crds = metadatainformer.NewFilteredSharedInformerFactory(mc, w.Resync, "", func(lo *metav1.ListOptions) {
		lo.FieldSelector = "metadata.name=" + NADCRD
	}).ForResource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).Informer()
	if _, err = w.crds.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { w.startNADs() }}); err != nil {
		return nil, err
	}
	w.reports = newReportQueue(cs, w.Log)
	w.reports.rename = w.statusName
	return w, nil
}

// blocksOf is a Network's status entries' blocks and addresses, as JSON.
func blocksOf(o any) string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
	var out []string
	for _, n := range nodes {
		if m, ok := n.(map[string]any); ok {
			out = append(out, fmt.Sprint(m["node"], m["block"], m["address"]))
		}
	}
	return strings.Join(out, ";")
}

// startNADs starts the NetworkAttachmentDefinitions' informer, once (their
// CRD was found); with no NADImage kurma does not serve them.
func (w *NetworkWatcher) startNADs() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nadInformer != nil || w.NADImage == "" || w.ctx == nil {
		return
	}
	w.nadInformer = dynamicinformer.NewDynamicSharedInformerFactory(w.dyn, w.Resync).ForResource(NADGVR).Informer()
	if _, err := w.nadInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke(w.changed) }, DeleteFunc: func(any) { poke(w.changed) },
		UpdateFunc: func(o, n any) {
			if metaOf(o).GetResourceVersion() != metaOf(n).GetResourceVersion() {
				poke(w.changed)
			}
		},
	}); err != nil {
		w.Log.WithError(err).Error("watching Multus' NetworkAttachmentDefinitions")
		return
	}
	go w.nadInformer.Run(w.ctx.Done())
	w.Log.Info("Multus' NetworkAttachmentDefinition CRD is installed: serving its objects")
}

// nadList is the NetworkAttachmentDefinitions known now, each as served
// (nadOf); none before their CRD is found.
func (w *NetworkWatcher) nadList() []*nad {
	inf := w.nadInformer
	if inf == nil {
		return nil
	}
	var out []*nad
	for _, o := range inf.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, nadOf(u, w.NADImage))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ref() < out[j].ref() })
	return out
}

// statusName is how a pod's network-status annotation names kurmad
// network n: a NetworkAttachmentDefinition's network by namespace/name,
// as Multus does; any other by its name.
func (w *NetworkWatcher) statusName(n string) string {
	if !strings.HasPrefix(n, nadPrefix) {
		return n
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ref, d := range w.nads {
		if d.Network == n {
			return ref
		}
	}
	return n
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
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	go w.crds.Run(ctx.Done())
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
		n, err := NetworkObjectOf(u)
		if err != nil {
			w.Log.WithError(err).WithField("network", u.GetName()).Warn("a Network object kurma cannot read")
			continue
		}
		out = append(out, n)
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
// Network objects known now, their placeholders filled in from in (the
// node); it also writes the registry credentials of their pull secrets.
// For boot: kurmad starts with them.
func (w *NetworkWatcher) Render(ctx context.Context, base []byte, in Input) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.base, w.input = base, in
	w.baseNames = configNames(base)
	cfg, err := w.merge(ctx)
	if err == nil {
		w.written = cfg
	}
	return cfg, err
}

// merge is Render under w.mu. A Network being deleted is not in the
// config: kurmad retires it (its pods keep their generations); the
// NetworkAttachmentDefinitions are, each as its network.
func (w *NetworkWatcher) merge(ctx context.Context) ([]byte, error) {
	var objs []*NetworkObject
	for _, o := range w.objects() {
		if !o.Deleting() {
			objs = append(objs, o)
		}
	}
	refused := map[string]NodeStatus{}
	secrets, auth := w.pullSecrets(ctx, objs, refused)
	images := w.images(ctx, objs, secrets, refused)
	w.nextResolve()
	trust, badTrust := w.trustFiles(ctx, objs)
	w.trust = trust
	for name, err := range badTrust {
		delete(images, name)
		if _, ok := refused[name]; !ok {
			refused[name] = NodeStatus{State: api.StateFailed, Reason: err.Error()}
		}
	}
	nads, all := w.addNADs(objs, images)
	m, err := MergeNetworks(MergeInput{Base: w.base, Objects: all, Images: images, Trust: trust, BaseDir: w.BaseDir,
		Render: w.renderObject, Refuse: w.refuseObject})
	if err != nil {
		return nil, err
	}
	for name, st := range refused {
		if cur, ok := m.Refused[name]; !ok || cur.State == StatePending {
			m.Refused[name] = st
		}
	}
	w.noteNADs(nads, m.Refused)
	w.refused = m.Refused
	if w.AuthFile != "" && !bytes.Equal(auth, w.auth) {
		if err := writeAtomic(w.AuthFile, bytes.NewReader(auth), 0o600); err != nil {
			return nil, err
		}
		w.auth = auth
	}
	return m.Config, nil
}

// pullSecrets reads the pull secrets objs name, each once, and merges
// their credentials into the auth file's content (MergeAuths); an object
// whose Secret cannot be read or merged is refused, by name.
func (w *NetworkWatcher) pullSecrets(ctx context.Context, objs []*NetworkObject, refused map[string]NodeStatus) (map[string][]byte, []byte) {
	secrets := map[string][]byte{}
	repos := map[string][]string{}
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
	for _, o := range objs {
		if err := badSecrets[o.Spec.ImagePullSecret]; err != nil {
			refused[o.Metadata.Name] = NodeStatus{State: api.StateFailed, Reason: "spec.imagePullSecret: " + err.Error()}
		}
	}
	return secrets, auth
}

// images is the image kurmad runs for each of objs not refused already,
// by name (image); one that has none yet is refused.
func (w *NetworkWatcher) images(ctx context.Context, objs []*NetworkObject, secrets map[string][]byte, refused map[string]NodeStatus) map[string]string {
	images := map[string]string{}
	for _, o := range objs {
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
	return images
}

// nextResolve forgets the failed resolutions of Networks that are gone
// and sets retryAt to the soonest of the others' next tries.
func (w *NetworkWatcher) nextResolve() {
	w.retryAt = time.Time{}
	for k, t := range w.retryResolve {
		if name, _, _ := strings.Cut(k, "\x00"); w.object(name) == nil {
			delete(w.retryResolve, k)
		} else if w.retryAt.IsZero() || t.Before(w.retryAt) {
			w.retryAt = t
		}
	}
}

// addNADs are the NetworkAttachmentDefinitions, by namespace/name, and
// objs with those kurma serves after them, their images added to images:
// a Network of the same name as a NAD's network keeps it.
func (w *NetworkWatcher) addNADs(objs []*NetworkObject, images map[string]string) (map[string]*nad, []*NetworkObject) {
	nads := map[string]*nad{}
	all := slices.Clone(objs)
	for _, d := range w.nadList() {
		nads[d.ref()] = d
		switch {
		case d.Err != nil:
		case w.object(d.Network) != nil || slices.Contains(w.baseNames, d.Network):
			d.Err = fmt.Errorf("NetworkAttachmentDefinition %s: its network's name %q is a kurma network's", d.ref(), d.Network)
		default:
			all = append(all, d.Object)
			images[d.Network] = d.Object.Spec.Image
		}
	}
	return nads, all
}

// noteNADs keeps nads as merged, each with why kurma does not serve it
// (refused: the merge's refusals, by network).
func (w *NetworkWatcher) noteNADs(nads map[string]*nad, refused map[string]NodeStatus) {
	for _, d := range nads {
		if st, ok := refused[d.Network]; ok && d.Err == nil {
			d.Err = fmt.Errorf("NetworkAttachmentDefinition %s: %s", d.ref(), st.Reason)
		}
		if d.Err != nil {
			w.Log.WithError(d.Err).WithField("nad", d.ref()).Debug("a NetworkAttachmentDefinition kurma does not serve")
		}
	}
	w.nads = nads
}

// renderObject is o's entry with the placeholders filled in for this
// node: the node's (as in the template) and, for a Network kurma spans,
// its subnet and this node's block of it.
func (w *NetworkWatcher) renderObject(o *NetworkObject, entry []byte) ([]byte, error) {
	in := w.input
	if in.Node == nil {
		return entry, nil // no node (tests of the merge alone)
	}
	sp, ok, err := o.Span()
	if err != nil {
		return nil, err
	}
	if ok {
		in.Span = &sp
		if b, held := blockOf(sp, o.Status.Nodes, w.NodeName); held {
			in.Block = b
		}
	}
	return Render(entry, in)
}

// refuseObject refuses a Network kurma cannot span from this node: a
// subnet of a family the node has no address of.
func (w *NetworkWatcher) refuseObject(o *NetworkObject) *NodeStatus {
	sp, ok, err := o.Span()
	if err != nil {
		return &NodeStatus{State: StateInvalid, Reason: err.Error()}
	}
	if ok && w.input.Node != nil {
		if _, err := w.address(sp); err != nil {
			return &NodeStatus{State: StateInvalid, Reason: err.Error()}
		}
	}
	return nil
}

// address is this node's address a block of sp is routed to: its first
// InternalIP of sp's family.
func (w *NetworkWatcher) address(sp Span) (netip.Addr, error) {
	ips, err := nodeIPs(w.input.Node)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, ip := range ips {
		if ip.Is4() == sp.Subnet.Addr().Is4() {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("spec.subnet %s: node %q has no InternalIP of its family (%s) to route its block to", sp.Subnet, w.NodeName, ips)
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
// failed reload's, image resolution's or status write's next try, or the
// end of a finalizer's hold for a pod let in (holding); zero for none.
func (w *NetworkWatcher) due() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	due := time.Time{}
	for _, t := range []time.Time{w.retryAt, w.reportAt, w.holdAt} {
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
// the one to (see summary); it takes this node's block of each Network
// kurma spans (claimBlock) and routes the other nodes' blocks (route),
// and keeps this node's finalizer on each Network while pods here hold it
// (keepFinalizer).
func (w *NetworkWatcher) report(ctx context.Context) {
	w.mu.Lock()
	refused, gens, have := w.refused, w.gens, w.haveGens
	w.holdAt = time.Time{}
	w.mu.Unlock()
	if !have {
		return // kurmad not reached yet: its first answer reports
	}
	failed := false
	defer func() { w.reportDone(failed) }()
	routeErr := w.route()
	failed = routeErr != nil // tried again with the backoff
	for _, o := range w.objects() {
		if !w.reportOn(ctx, o, refused, gens, routeErr) {
			failed = true
		}
	}
	for name := range w.reported {
		if w.object(name) == nil {
			delete(w.reported, name)
		}
	}
}

// reportDone sets when report runs again though nothing changed: a
// failed write is tried again after a backoff (1 s doubling to a minute),
// not only at the next change.
func (w *NetworkWatcher) reportDone(failed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !failed {
		w.reportAt, w.reportFailures = time.Time{}, 0
		return
	}
	w.reportAt = time.Now().Add(min(time.Second<<min(w.reportFailures, 6), time.Minute))
	w.reportFailures++
}

// reportOn is report for object o: false when a write failed (this
// node's finalizer or entry), to be tried again.
func (w *NetworkWatcher) reportOn(ctx context.Context, o *NetworkObject, refused map[string]NodeStatus, gens []api.Generation, routeErr error) bool {
	if w.prune(ctx, o) {
		return true // its update (restate) reports on the object as written
	}
	pods := podsOf(gens, o.Metadata.Name)
	ok := w.keepFinalizer(ctx, o, pods)
	st := w.entry(o, refused, gens, pods)
	if sp, spans, _ := o.Span(); spans {
		var claimed bool
		if st, claimed = w.spanEntry(ctx, o, sp, st, routeErr); claimed {
			return ok // its update reports on the object with the block
		}
	}
	st.Node, st.ObservedGeneration = w.NodeName, o.Metadata.Generation
	return w.writeEntry(ctx, o, st) && ok
}

// entry is this node's entry for o (pods of it here): deleting, refused
// by the merge, or its state in kurmad's generations, with the note of
// its image resolution.
func (w *NetworkWatcher) entry(o *NetworkObject, refused map[string]NodeStatus, gens []api.Generation, pods int) NodeStatus {
	name := o.Metadata.Name
	st, ok := refused[name]
	switch {
	case o.Deleting():
		st = NodeStatus{State: StateDeleting, Pods: &pods}
		if pods > 0 {
			st.Reason = fmt.Sprintf("%d pods on this node still hold it", pods)
		}
	case !ok:
		st = nodeStatus(gens, name)
	}
	if note := w.notes[name]; note != "" && !o.Deleting() {
		st.Reason = strings.TrimPrefix(st.Reason+"; "+note, "; ")
	}
	return st
}

// spanEntry adds to st, this node's entry for o, which kurma spans over
// sp, the node's block and address, and why the other nodes' blocks are
// not routed (routeErr). A node without a block takes one (claimBlock):
// claimed, the object's update reports; failed, the entry says why.
func (w *NetworkWatcher) spanEntry(ctx context.Context, o *NetworkObject, sp Span, st NodeStatus, routeErr error) (_ NodeStatus, claimed bool) {
	if b, held := blockOf(sp, o.Status.Nodes, w.NodeName); held {
		st.Block = b.String()
		if a, err := w.address(sp); err == nil {
			st.Address = a.String()
		}
	} else if !o.Deleting() {
		if err := w.claimBlock(ctx, o, sp); err != nil {
			w.Log.WithError(err).WithField("network", o.Metadata.Name).Warn("taking this node's block of the Network's subnet")
			st = NodeStatus{State: StatePending, Reason: err.Error()}
		} else {
			return st, true
		}
	}
	if routeErr != nil && st.State == api.StateRunning {
		st.Reason = strings.TrimPrefix(st.Reason+"; routes to the other nodes' blocks: "+routeErr.Error(), "; ")
	}
	return st, false
}

// writeEntry writes st, this node's entry, into o's status unless it
// says what the entry there says (then the summary, when this node is the
// one to); false when the write failed.
func (w *NetworkWatcher) writeEntry(ctx context.Context, o *NetworkObject, st NodeStatus) bool {
	name := o.Metadata.Name
	cur, had := w.reported[name]
	if !had {
		if i := slices.IndexFunc(o.Status.Nodes, func(n NodeStatus) bool { return n.Node == w.NodeName }); i >= 0 {
			cur, had = o.Status.Nodes[i], true
		}
	}
	if had && sameStatus(cur, st) {
		w.reported[name] = cur
		w.summary(ctx, o)
		return true
	}
	st.LastTransitionTime = metav1.Now()
	if err := w.applyStatus(ctx, name, "kurma-node/"+w.NodeName, map[string]any{"nodes": []NodeStatus{st}}); err != nil {
		w.Log.WithError(err).WithField("network", name).Warn("writing the Network's status for this node")
		return false
	}
	w.reported[name] = st
	return true
}

// podsOf counts the pods holding network name in kurmad's generations.
func podsOf(gens []api.Generation, name string) int {
	n := 0
	for _, g := range gens {
		if g.Network == name {
			n += g.Pods
		}
	}
	return n
}

// claimBlock takes a free block of sp for this node: its entry, with the
// block and the node's address, written into the object's status.nodes
// by a merge patch bound to the resourceVersion the choice was made on,
// so that two nodes never take one block (the later write is refused, and
// its node chooses again on the object's update). The blocks of entries
// of deleted Nodes are free again once pruned.
func (w *NetworkWatcher) claimBlock(ctx context.Context, o *NetworkObject, sp Span) error {
	addr, err := w.address(sp)
	if err != nil {
		return err
	}
	block, err := sp.Free(takenBlocks(sp, o.Status.Nodes, w.NodeName))
	if err != nil {
		return err
	}
	nodes := slices.Clone(o.Status.Nodes)
	i := slices.IndexFunc(nodes, func(n NodeStatus) bool { return n.Node == w.NodeName })
	if i < 0 {
		nodes = append(nodes, NodeStatus{Node: w.NodeName, State: StatePending, Reason: "taking a block of spec.subnet"})
		i = len(nodes) - 1
	}
	nodes[i].Block, nodes[i].Address = block.String(), addr.String()
	nodes[i].ObservedGeneration, nodes[i].LastTransitionTime = o.Metadata.Generation, metav1.Now()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": o.Metadata.ResourceVersion},
		"status": map[string]any{"nodes": nodes}})
	if err != nil {
		return err
	}
	_, err = w.dyn.Resource(NetworkGVR).Patch(ctx, o.Metadata.Name, ktypes.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "kurma-node/" + w.NodeName}, "status")
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil // another write came first: the update brings it, and this node chooses again
	case err != nil:
		return fmt.Errorf("writing this node's block %s: %w", block, err)
	}
	w.Log.WithFields(logrus.Fields{"network": o.Metadata.Name, "block": block, "address": addr}).Info("took this node's block of the Network's subnet")
	return nil
}

// route makes this node's routes for the Networks kurma spans: each other
// node's block via its address (from the entries), and the subnets closed
// to the rest (see KernelRouter). A Network being deleted keeps its routes
// while pods hold it; one gone takes them along. It asks the Router only
// when they changed (or the last try failed), and returns the last try's
// error.
func (w *NetworkWatcher) route() error {
	if w.Router == nil {
		return nil
	}
	var want []SpanRoutes
	for _, o := range w.objects() {
		sp, ok, err := o.Span()
		if err != nil || !ok {
			continue
		}
		if _, held := blockOf(sp, o.Status.Nodes, w.NodeName); !held {
			continue
		}
		r := SpanRoutes{Network: o.Metadata.Name, Subnet: sp.Subnet}
		for _, e := range o.Status.Nodes {
			b, held := blockOf(sp, o.Status.Nodes, e.Node)
			via, err := netip.ParseAddr(e.Address)
			if e.Node == w.NodeName || !held || err != nil || via.Is4() != sp.Subnet.Addr().Is4() {
				continue
			}
			r.Blocks = append(r.Blocks, BlockRoute{Block: b, Via: via})
		}
		sort.Slice(r.Blocks, func(i, j int) bool { return r.Blocks[i].Block.String() < r.Blocks[j].Block.String() })
		want = append(want, r)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unrouted || w.routed && w.routeErr == nil && spanRoutesEqual(want, w.routes) {
		return nil
	}
	w.routes, w.routed = want, true
	w.routeErr = w.Router.Route(want)
	if w.routeErr != nil {
		w.Log.WithError(w.routeErr).Warn("routing the spanning Networks' blocks")
	} else if len(want) > 0 {
		w.Log.WithField("networks", len(want)).Debug("routed the spanning Networks' blocks")
	}
	return w.routeErr
}

// Unroute removes this node's routes and rules of the Networks kurma
// spans, and keeps route from making them again: kurma is being
// uninstalled from the node, and no kurma-node would remove them later.
// Pods of those Networks still on the node reach no other node's from
// then on (the docs say to delete the workloads first).
func (w *NetworkWatcher) Unroute() error {
	if w.Router == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unrouted, w.routes, w.routed = true, nil, true
	w.routeErr = w.Router.Route(nil)
	if w.routeErr != nil {
		return fmt.Errorf("removing the spanning Networks' routes and rules: %w", w.routeErr)
	}
	return nil
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
	// Their finalizers go too: a deleted node holds no pod.
	fins := slices.DeleteFunc(slices.Clone(o.Metadata.Finalizers), func(f string) bool {
		return slices.ContainsFunc(gone, func(n string) bool { return NodeFinalizer(n) == f })
	})
	if len(fins) != len(o.Metadata.Finalizers) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fins}})
		if _, err := w.dyn.Resource(NetworkGVR).Patch(ctx, o.Metadata.Name, ktypes.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: "kurma-node-summary"}); err != nil && !apierrors.IsNotFound(err) {
			log.WithError(err).Warn("removing deleted nodes' finalizers from the Network")
		}
	}
	return true
}

// sameStatus: a and b say the same, whenever they were written.
func sameStatus(a, b NodeStatus) bool {
	if (a.Pods == nil) != (b.Pods == nil) || a.Pods != nil && *a.Pods != *b.Pods {
		return false
	}
	a.LastTransitionTime, b.LastTransitionTime = metav1.Time{}, metav1.Time{}
	a.Pods, b.Pods = nil, nil // compared by value above, not by pointer
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

// summary writes status.running and .failing (and, while the object is
// being deleted, .pods) when they do not count status.nodes and this
// node's entry changed last (ties: the first name): one node writes them,
// the one whose write made them stale.
func (w *NetworkWatcher) summary(ctx context.Context, o *NetworkObject) {
	if LastWriter(o.Status.Nodes) != w.NodeName {
		return
	}
	running, failing := Counts(o.Status.Nodes)
	var pods *int
	if o.Deleting() {
		pods = PodCount(o.Status.Nodes)
	}
	if o.Status.Running != nil && *o.Status.Running == running && o.Status.Failing != nil && *o.Status.Failing == failing &&
		(pods == nil || o.Status.Pods != nil && *o.Status.Pods == *pods) {
		return
	}
	sum := map[string]any{"running": running, "failing": failing}
	if pods != nil {
		sum["pods"] = *pods
	}
	if err := w.applyStatus(ctx, o.Metadata.Name, "kurma-node-summary", sum); err != nil {
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
		if o.Deleting() {
			return &AccessDenied{Network: name, Namespace: namespace, Reason: UnavailableReason,
				Message: fmt.Sprintf("network %q is being deleted: it takes no new pod", name)}, nil
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

// AccessDenied is a pod refused a network: its namespace does not match
// the network's rule, or (Message) the network cannot take it.
type AccessDenied struct {
	Network, Namespace, Rule string
	// Reason is the Event's reason (RefusedReason when ""); Message
	// replaces the rule's when set.
	Reason, Message string
}

func (e *AccessDenied) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("network %q does not admit pods of namespace %q: the namespace's labels do not match its %s", e.Network, e.Namespace, e.Rule)
}

// EventReason is the reason of the Event the refused pod gets.
func (e *AccessDenied) EventReason() string {
	if e.Reason == "" {
		return RefusedReason
	}
	return e.Reason
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
