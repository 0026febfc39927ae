// Package enforcer is the kurma-netpol daemon: it enforces Kubernetes
// NetworkPolicy (and, when asked, AdminNetworkPolicy and
// BaselineAdminNetworkPolicy) on the pod addresses of the networks that
// opted in, with kube-network-policies' engine judging the first packet of
// each connection and kurma-netpol's own nftables table (package nftable)
// sending those packets to it.
package enforcer

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
	npaclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	npainformers "sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"
	"sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions/apis/v1alpha1"

	"github.com/kurma-project/kurma/plugins/netpol/internal/config"
	"github.com/kurma-project/kurma/plugins/netpol/internal/nftable"
	"github.com/kurma-project/kurma/plugins/netpol/internal/podaddrs"
)

// DefaultDebounce is how long set updates wait after one another, so a
// burst of events costs one nftables transaction rather than one each; a
// lone event is applied at once.
const DefaultDebounce = 20 * time.Millisecond

// Options are what Run needs.
type Options struct {
	Config   *config.Config
	NodeName string
	Client   kubernetes.Interface
	// NPAClient serves AdminNetworkPolicy and BaselineAdminNetworkPolicy;
	// required when the config turns either on.
	NPAClient npaclient.Interface
	// ReadyFile is written once the informers have synced and the table is
	// installed, and removed when Run returns.
	ReadyFile string
	Log       *logrus.Entry
	// Debounce: DefaultDebounce when 0.
	Debounce time.Duration
	// Verbosity is the klog level of the library's lines that are logged.
	Verbosity int
}

// ReadyFile is the default readiness file of the network named network:
// /opt/network/status reads it.
func ReadyFile(network string) string {
	return filepath.Join("/run/kurma-netpol", network+".ready")
}

// Run enforces policy until ctx ends, then removes its table and
// readiness file and returns nil; an error means it could not start.
func Run(ctx context.Context, opts Options) error {
	cfg := opts.Config
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	if (cfg.AdminNetworkPolicy || cfg.BaselineAdminNetworkPolicy) && opts.NPAClient == nil {
		return fmt.Errorf("network %q: admin_network_policy needs a client of policy.networking.k8s.io", cfg.Name)
	}
	native, err := nftable.QueueExprSupported(0)
	if err != nil {
		return fmt.Errorf("network %q: %w", cfg.Name, err)
	}
	tableName := nftable.TableName(cfg.Name)
	log := startLog(opts, tableName, native)

	inf := newInformers(opts)
	ctrl, err := newController(opts, inf, tableName)
	if err != nil {
		return fmt.Errorf("network %q: %w", cfg.Name, err)
	}
	e := &enforcer{log: log, node: opts.NodeName, debounce: opts.Debounce, kick: make(chan struct{}, 1),
		pods: inf.pods.Lister(), policies: inf.policies.Lister()}
	if err := e.watch(inf); err != nil {
		return fmt.Errorf("network %q: %w", cfg.Name, err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	inf.start(runCtx)
	started := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), inf.synced()...) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("network %q: informers did not sync", cfg.Name)
	}
	log.WithField("duration", time.Since(started).Round(time.Millisecond)).Info("informers synced")

	if err := e.install(cfg, tableName, inf.queueAll, native); err != nil {
		return fmt.Errorf("network %q: %w", cfg.Name, err)
	}
	defer func() {
		if err := e.table.Remove(); err != nil {
			log.WithError(err).Error("removing the table")
		} else {
			log.Info("table removed")
		}
	}()

	go e.syncSets(runCtx)
	if err := writeReady(opts.ReadyFile); err != nil {
		return fmt.Errorf("network %q: readiness file: %w", cfg.Name, err)
	}
	defer os.Remove(opts.ReadyFile)
	log.WithField("file", opts.ReadyFile).Info("ready")

	runLibrary(runCtx, log, ctrl, cfg.Queue)
	log.Info("stopping")
	return nil
}

// startLog is the daemon's log, its first line written, and klog (the
// library's) routed into it.
func startLog(opts Options, tableName string, native bool) *logrus.Entry {
	cfg := opts.Config
	verdict := "xtables NFQUEUE target (nft_compat): this kernel has no nft queue expression"
	if native {
		verdict = "nft queue expression"
	}
	log := opts.Log.WithFields(logrus.Fields{"network": cfg.Name, "table": "inet " + tableName})
	log.WithFields(logrus.Fields{"queue": cfg.Queue, "verdict": verdict, "node": opts.NodeName,
		"policy_networks": cfg.PolicyNetworks, "cluster_network": cfg.ClusterNetwork, "fail_open": cfg.FailOpen}).Info("starting")
	setKlogVerbosity(opts.Verbosity)
	klog.SetLogger(logr.New(newKlogSink(opts.Log.WithFields(logrus.Fields{"network": cfg.Name, "from": "kube-network-policies"}),
		opts.Verbosity, tableName)))
	return log
}

// informerSet is what the daemon and the library watch: the admin
// policies' and the nodes' informers only when the admin policies are on.
type informerSet struct {
	factory    informers.SharedInformerFactory
	policies   networkinginformers.NetworkPolicyInformer
	namespaces coreinformers.NamespaceInformer
	// pods are the pods with their policed addresses (podaddrs).
	pods       coreinformers.PodInformer
	nodes      coreinformers.NodeInformer
	npaFactory npainformers.SharedInformerFactory
	anp        v1alpha1.AdminNetworkPolicyInformer
	banp       v1alpha1.BaselineAdminNetworkPolicyInformer
	// queueAll: with the admin policies every new connection is judged.
	queueAll bool
}

func newInformers(opts Options) *informerSet {
	cfg := opts.Config
	sel := podaddrs.Selection{Networks: cfg.PolicyNetworks, ClusterNetwork: cfg.ClusterNetwork}
	inf := &informerSet{factory: informers.NewSharedInformerFactory(opts.Client, 0)}
	inf.policies = inf.factory.Networking().V1().NetworkPolicies()
	inf.namespaces = inf.factory.Core().V1().Namespaces()
	inf.pods = podaddrs.NewInformer(opts.Client, sel)
	inf.queueAll = cfg.AdminNetworkPolicy || cfg.BaselineAdminNetworkPolicy
	if inf.queueAll {
		inf.nodes = inf.factory.Core().V1().Nodes()
		inf.npaFactory = npainformers.NewSharedInformerFactory(opts.NPAClient, 0)
		if cfg.AdminNetworkPolicy {
			inf.anp = inf.npaFactory.Policy().V1alpha1().AdminNetworkPolicies()
		}
		if cfg.BaselineAdminNetworkPolicy {
			inf.banp = inf.npaFactory.Policy().V1alpha1().BaselineAdminNetworkPolicies()
		}
	}
	return inf
}

func (inf *informerSet) start(ctx context.Context) {
	inf.factory.Start(ctx.Done())
	go inf.pods.Informer().Run(ctx.Done())
	if inf.npaFactory != nil {
		inf.npaFactory.Start(ctx.Done())
	}
}

func (inf *informerSet) synced() []cache.InformerSynced {
	synced := []cache.InformerSynced{inf.pods.Informer().HasSynced, inf.policies.Informer().HasSynced,
		inf.namespaces.Informer().HasSynced}
	if inf.nodes != nil {
		synced = append(synced, inf.nodes.Informer().HasSynced)
	}
	if inf.anp != nil {
		synced = append(synced, inf.anp.Informer().HasSynced)
	}
	if inf.banp != nil {
		synced = append(synced, inf.banp.Informer().HasSynced)
	}
	return synced
}

// newController is kube-network-policies' engine over inf, NRI off.
func newController(opts Options, inf *informerSet, tableName string) (*networkpolicy.Controller, error) {
	cfg := opts.Config
	ctrl, err := networkpolicy.NewController(opts.Client, inf.policies, inf.namespaces, inf.pods, inf.nodes,
		opts.NPAClient, inf.anp, inf.banp,
		networkpolicy.Config{
			FailOpen:                   cfg.FailOpen,
			AdminNetworkPolicy:         cfg.AdminNetworkPolicy,
			BaselineAdminNetworkPolicy: cfg.BaselineAdminNetworkPolicy,
			QueueID:                    cfg.Queue,
			NodeName:                   opts.NodeName,
			// The library's own table takes the daemon's table's name,
			// which the daemon's socket owns: the library can never
			// write it (see klogSink).
			NFTableName: tableName,
			NRIdisabled: true,
		})
	if err != nil {
		return nil, fmt.Errorf("kube-network-policies: %w", err)
	}
	if err := withoutNRI(ctrl); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// watch has a change of a local pod or of any policy update the sets. The
// sets hold this node's pods' addresses: other nodes' pods do not change
// them.
func (e *enforcer) watch(inf *informerSet) error {
	local := func(objs ...any) bool {
		for _, o := range objs {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*v1.Pod); !ok || p.Spec.NodeName == e.node {
				return true
			}
		}
		return false
	}
	handlers := map[cache.SharedIndexInformer]cache.ResourceEventHandler{
		inf.pods.Informer(): cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { e.changedIf(local(o)) },
			UpdateFunc: func(o, n any) { e.changedIf(local(o, n)) },
			DeleteFunc: func(o any) { e.changedIf(local(o)) },
		},
		inf.policies.Informer(): cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { e.changed() },
			UpdateFunc: func(any, any) { e.changed() },
			DeleteFunc: func(any) { e.changed() },
		},
	}
	for i, h := range handlers {
		if _, err := i.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// install makes the daemon's table with the current addresses and removes
// the tables daemons of this network left when they died.
func (e *enforcer) install(cfg *config.Config, tableName string, queueAll, native bool) error {
	addrs := e.addresses()
	table, err := nftable.Install(nftable.Options{Name: tableName, Queue: uint16(cfg.Queue), FailOpen: cfg.FailOpen,
		QueueAll: queueAll, Native: native}, addrs)
	if err != nil {
		return err
	}
	e.table = table
	e.applied = addrs
	crash := "fail-closed: the table stays until the next start removes it"
	switch {
	case cfg.FailOpen:
		crash = "fail-open: the table goes with the daemon, and the queue lets packets through without it"
	case !table.Persistent():
		crash = "fail-open: this kernel has no persistent nftables tables (Linux < 6.9), the table goes with the daemon"
	}
	e.log.WithFields(logrus.Fields{"addresses": len(addrs), "queue_all": queueAll, "on_crash": crash}).Info("table installed")
	if removed, err := nftable.RemoveOrphans(0, cfg.Name); err != nil {
		e.log.WithError(err).Warn("removing tables left by earlier daemons")
	} else if len(removed) > 0 {
		e.log.WithField("tables", removed).Info("removed tables left by daemons that died")
	}
	return nil
}

// setKlogVerbosity sets klog's own -v, which decides the library's
// klog.V(n) lines (its contextual logger asks the sink, klogSink.Enabled).
func setKlogVerbosity(v int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(v))
}

// runLibrary runs the library's controller (its nfqueue reader: the
// verdicts) until ctx ends. The queue can be bound by one process only:
// while another holds it (the daemon of an earlier generation, which
// keeps judging the packets this daemon's table queues) it waits.
func runLibrary(ctx context.Context, log *logrus.Entry, ctrl *networkpolicy.Controller, queue int) {
	backoff := 100 * time.Millisecond
	waiting := false
	for ctx.Err() == nil {
		if held, err := queueHeld(queue); err == nil && held {
			if !waiting {
				log.WithField("queue", queue).Info("waiting for the queue: another process holds it (an earlier generation?)")
				waiting = true
			}
			if !sleepCtx(ctx, backoff) {
				return
			}
			continue
		}
		runCtx, cancel := context.WithCancel(ctx)
		start := time.Now()
		err := ctrl.Run(runCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		// Run returns early only when it could not bind the queue.
		log.WithError(err).WithFields(logrus.Fields{"queue": queue, "after": time.Since(start).Round(time.Millisecond)}).
			Warn("kube-network-policies stopped; starting it again")
		if !sleepCtx(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// queueHeld says whether a process is bound to nfqueue queue in this
// network namespace (/proc/net/netfilter/nfnetlink_queue lists one line
// per bound queue, its number first).
func queueHeld(queue int) (bool, error) {
	f, err := os.Open("/proc/net/netfilter/nfnetlink_queue")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && fields[0] == strconv.Itoa(queue) {
			return true, nil
		}
	}
	return false, sc.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func writeReady(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// withoutNRI makes the library safe with NRI disabled. kube-network-policies
// v0.8.0 looks an address no pod has up in its NRI plugin, which is nil
// when NRI is disabled: the first queued packet to or from an address that
// is no pod's (the API server, a node, anything outside) would crash the
// daemon (fixed upstream after v0.8.0). An empty plugin answers "no pod"
// instead. The library is pinned in go.mod; a test checks the field.
func withoutNRI(ctrl *networkpolicy.Controller) error {
	f := reflect.ValueOf(ctrl).Elem().FieldByName("nriPlugin")
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.Type().Elem().Kind() != reflect.Struct {
		return errors.New("kube-network-policies: the controller has no nriPlugin pointer: check withoutNRI against the library's version")
	}
	if !f.IsNil() {
		return nil
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.New(f.Type().Elem()))
	return nil
}

// enforcer keeps the table's sets in step with the informers.
type enforcer struct {
	log      *logrus.Entry
	node     string
	debounce time.Duration
	kick     chan struct{}
	pods     corelisters.PodLister
	policies networkinglisters.NetworkPolicyLister
	table    *nftable.Table

	mu      sync.Mutex
	applied []netip.Addr
}

// changedIf calls changed when yes.
func (e *enforcer) changedIf(yes bool) {
	if yes {
		e.changed()
	}
}

// changed notes that a local pod or a policy changed.
func (e *enforcer) changed() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// addresses are this node's pods' addresses that some NetworkPolicy
// selects, sorted: what the library's own table would queue for (its pod
// informer's addresses being the policed networks' ones).
func (e *enforcer) addresses() []netip.Addr {
	var out []netip.Addr
	policies, err := e.policies.List(labels.Everything())
	if err != nil {
		return nil
	}
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			continue
		}
		selected, err := e.pods.Pods(np.Namespace).List(sel)
		if err != nil {
			continue
		}
		for _, p := range selected {
			if p.Spec.NodeName != e.node {
				continue
			}
			for _, ip := range p.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil && !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// syncSets applies addresses() to the table after each change: at once
// when the last update is older than the debounce, else when it is.
func (e *enforcer) syncSets(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		}
		if wait := e.debounce - time.Since(last); wait > 0 && !sleepCtx(ctx, wait) {
			return
		}
		// Changes that came while waiting are in this update.
		select {
		case <-e.kick:
		default:
		}
		last = time.Now()
		addrs := e.addresses()
		e.mu.Lock()
		same := slices.Equal(addrs, e.applied)
		e.mu.Unlock()
		if same {
			continue
		}
		start := time.Now()
		if err := e.table.SetAddresses(addrs); err != nil {
			e.log.WithError(err).Error("updating the table's sets; trying again")
			time.AfterFunc(time.Second, e.changed)
			continue
		}
		e.mu.Lock()
		e.applied = addrs
		e.mu.Unlock()
		e.log.WithFields(logrus.Fields{"addresses": len(addrs), "duration": time.Since(start).Round(time.Microsecond)}).Debug("sets updated")
	}
}
