// Package podnet is the pod network lifecycle: it creates a pod's network
// namespace, attaches the requested networks one after the other through
// their plugins (run by an Execer, normally the plugin host), tears them
// down in reverse with the config each was attached with, and journals every
// step in pkg/state so that a kurmad killed at any instant leaves nothing
// behind once Reconcile ran at the next boot.
//
// Calls for one pod are serial; different pods proceed in parallel: no
// lock is held across a plugin call.
//
// A network may have several generations of its plugin container (kurmad
// starts a new one when the network's image or plugin config changes):
// each attachment journals the generation that served its add, and its del
// goes to that same generation. New attachments go to the generation
// Networks says serves their network, and each pod holds (Networks.Retain)
// the generations of its attachments until their dels succeeded.
package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// Execer runs a plugin call in its generation of a network's plugin
// container (networkpod.Host is one, through networks.Controller). It
// reads the call's stdin through Call.Stdin or Call.HeldStdin, and so
// honours the call's hold: an add's processes get their config only
// once its intent is durable. Errors for a call that did not succeed
// should carry the plugin's message; one for a call that did not run
// because that container is not running wraps netplugin.ErrUnavailable (a
// del is then tried again later, never run without its plugin). A
// plugin's CNI error object should be reachable with errors.As as a
// *types.Error.
type Execer interface {
	Exec(ctx context.Context, c netplugin.Call) (stdout, stderr []byte, err error)
}

// Provider is implemented by an Execer that knows which executables the
// image of a network's generation has (networkpod.Host does): the
// optional ones (check, gc) are then asked only of images that have them.
// Without it every image is asked.
type Provider interface {
	Provides(network string, generation int, path string) bool
}

// Networks is the owner of the networks and their generations
// (networks.Controller) as the pod lifecycle sees it: where new
// attachments go, and the references that keep a generation running while
// attachments need it. A holder is a pod's ID (or gcHolder).
type Networks interface {
	// Serving returns, from one instant, the config new pods attach with
	// (each network as the generation serving it runs it; also the
	// plugin timeout) and, by network name, where its new attachments go.
	// Both are shared: read, never changed.
	Serving() (*netconfig.Config, map[string]netplugin.Serving)
	// Ready returns nil when generation t can serve adds now, else the
	// error a create gets before it makes anything (wrapping
	// netplugin.ErrUnavailable or netplugin.ErrUnknownGeneration).
	Ready(t netplugin.Target) error
	// Retain makes holder hold each generation of ts, all or none: an
	// error wrapping netplugin.ErrUnknownGeneration when one is gone
	// since Serving named it (the create asks Serving again).
	Retain(holder string, ts ...netplugin.Target) error
	// Release ends holder's hold of ts; a retiring generation nothing
	// holds stops.
	Release(holder string, ts ...netplugin.Target)
	// GCTarget is the generation network's gc runs in and the config it
	// gets; an error wrapping netplugin.ErrUnavailable while none of the
	// network's generations runs, netplugin.ErrUnknownNetwork when it has
	// none.
	GCTarget(network string) (netplugin.Target, []byte, error)
	// Started returns a channel closed once a generation starts running
	// after the call: dels and gcs that waited for one run then.
	Started() <-chan struct{}
}

var (
	// ErrNotFound: no pod has that id (never existed, or already deleted).
	ErrNotFound = errors.New("pod not found")
	// ErrBadRequest: the request is malformed (bad network reference,
	// a network listed twice, no network at all).
	ErrBadRequest = errors.New("bad request")
	// ErrPodNotReady: the pod is not ready (being created or deleted, or
	// its teardown failed), so there is nothing to check.
	ErrPodNotReady = errors.New("pod is not ready")
	// ErrForeignNetns: a journaled pod's netns path is not
	// <NetnsDir>/<pod uuid>, the only place kurmad makes one; the pod is left
	// alone (no del, nothing removed) and stays failed with this error.
	ErrForeignNetns = errors.New("journaled netns path is not the pod's own")
	// ErrNameInUse: another pod kurmad holds has the name asked for.
	ErrNameInUse = errors.New("pod name in use")
	// ErrTryAgainLater: a plugin's add answered CNI error 11 ("try again
	// later") until the call's limit; the pod was not made.
	ErrTryAgainLater = errors.New("the plugin asked to try again later")
)

// Options configure a Manager.
type Options struct {
	// Networks says where new attachments go and holds their generations.
	Networks Networks
	// Exec runs the plugins (networks.Controller, over the plugin host).
	Exec  Execer
	Store *state.Store
	// NetnsDir holds the pods' netns bind mounts (<run_dir>/netns).
	NetnsDir string
	// PodsDir holds per-pod files such as resolv.conf (<run_dir>/pods).
	PodsDir string
	// NetnsPool makes the pods' namespaces; nil → one that keeps none
	// ready (each made when asked for).
	NetnsPool *netnsfile.Pool
	// HostResolvConf is copied for pods whose results carry no DNS;
	// "" → /etc/resolv.conf.
	HostResolvConf string
	// TeardownTimeout bounds each del run during rollback, delete and
	// reconcile, which never use a cancelled caller context; 0 → the
	// config's plugin timeout plus 30s.
	TeardownTimeout time.Duration
	// RetryBase and RetryMax bound the backoff of a teardown that did not
	// finish and is tried again in the background (RunRetries); defaults
	// 1s and 5m.
	RetryBase, RetryMax time.Duration
	// Removed, when set, is called after a pod's record went from the
	// journal (deleted, rolled back or removed by force), in the goroutine
	// that removed it: it must return quickly.
	Removed func(id string)
	// RuntimeDropped, when set, hears each runtime pod found dropped by
	// its runtime (reason DroppedNetnsGone or DroppedNetnsReplaced) as its
	// release starts; RuntimeRebound each runtime pod whose lost bind
	// mount was made again (see CheckRuntimes). Both must return quickly.
	RuntimeDropped func(reason string)
	RuntimeRebound func()
	Logger         logrus.FieldLogger
}

// CreateRequest asks for a pod. Networks are "name" or
// "name:KEY=VALUE;KEY=VALUE"; empty means every default network.
type CreateRequest struct {
	Name     string
	Networks []string
	// RuntimeConfig holds capability arguments per network name (CNI's
	// runtimeConfig); each network gets those its config declares.
	RuntimeConfig map[string]netconfig.RuntimeConfig
	// Interfaces names the interface of a network's attachment (network
	// name → interface), instead of its template or the first free ethN.
	Interfaces map[string]string
	// Runtime, when set, makes the pod in a container runtime's netns
	// rather than one kurmad makes (see runtime.go): its Owner,
	// ContainerID, Interface, Network and Netns; kurmad sets the rest.
	Runtime *state.Runtime
}

// Manager creates, deletes and reconciles pods.
type Manager struct {
	opts    Options
	log     logrus.FieldLogger
	retries *retrier
	netns   *netnsfile.Pool

	mu       sync.Mutex // guards what follows, never held across a plugin call
	locks    map[string]*podLock
	inflight map[string][]netplugin.Target // creates under way: the generations they retained
	names    map[string]string             // pod name → id, every journaled pod; nil until first used
	netLocks map[string]*sync.RWMutex      // by network: adds share it, GC holds it alone
	checks   map[string]*PodCheck          // by pod id: the last check
	gcWait   map[string]bool               // networks whose gc waits for a running generation
	gcOwed   map[netplugin.Target]bool     // generations gcHolder holds for a gc a removal by force owes
	sweepDue bool                          // a Collect's orphan netns sweep waits for those gcs
	gcFailed map[string]bool               // networks whose last gc failed
	bootSkip []string                      // networks whose boot gc a clean stop made needless (SkipBootGC)

	gcRun gcRunner // RunRetries' runs of the gcs that wait

	held heldAddrs // the addresses done attachments hold (checkResult)

	after sync.WaitGroup // what a delete does after its answer (afterAnswer)

	bootID string // the host's boot ID (see bootID), journaled with runtime pods
}

type podLock struct {
	mu   sync.Mutex
	refs int
}

// New returns a Manager; it creates NetnsDir and PodsDir.
func New(opts Options) (*Manager, error) {
	switch {
	case opts.Networks == nil:
		return nil, errors.New("podnet: no Networks")
	case opts.Exec == nil:
		return nil, errors.New("podnet: no Execer")
	case opts.Store == nil:
		return nil, errors.New("podnet: no journal")
	case opts.NetnsDir == "" || opts.PodsDir == "":
		return nil, errors.New("podnet: NetnsDir and PodsDir are required")
	}
	for _, d := range []string{opts.NetnsDir, opts.PodsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("podnet: %w", err)
		}
	}
	if opts.NetnsPool == nil {
		opts.NetnsPool = netnsfile.NewPool(0)
	}
	if opts.HostResolvConf == "" {
		opts.HostResolvConf = "/etc/resolv.conf"
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.SetOutput(os.Stderr)
		opts.Logger = l
	}
	m := &Manager{opts: opts, log: opts.Logger, locks: map[string]*podLock{}, inflight: map[string][]netplugin.Target{},
		netLocks: map[string]*sync.RWMutex{}, checks: map[string]*PodCheck{}, gcWait: map[string]bool{}, gcOwed: map[netplugin.Target]bool{},
		gcFailed: map[string]bool{}, retries: newRetrier(opts.RetryBase, opts.RetryMax), bootID: bootID(), netns: opts.NetnsPool}
	return m, nil
}

// config is the config new pods attach with.
func (m *Manager) config() *netconfig.Config {
	cfg, _ := m.opts.Networks.Serving()
	return cfg
}

// lockPod serializes operations on one pod id.
func (m *Manager) lockPod(id string) (unlock func()) {
	m.mu.Lock()
	l := m.locks[id]
	if l == nil {
		l = &podLock{}
		m.locks[id] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.locks, id)
		}
		m.mu.Unlock()
	}
}

// netLock is network's lock between adds (shared) and GC (alone).
func (m *Manager) netLock(network string) *sync.RWMutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.netLocks[network]
	if l == nil {
		l = &sync.RWMutex{}
		m.netLocks[network] = l
	}
	return l
}

// Get returns the journal's record of pod id, or ErrNotFound.
func (m *Manager) Get(id string) (*state.Pod, error) {
	rec, err := m.opts.Store.GetPod(id)
	if errors.Is(err, state.ErrNotFound) {
		return nil, fmt.Errorf("pod %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// List returns the journal's record of every pod that is not being
// created, oldest first.
func (m *Manager) List() []*state.Pod {
	return m.opts.Store.FindPods(func(p *state.Pod) bool { return p.Phase != state.PhaseCreating })
}

// ListAll returns what List does and the pods whose create is under way
// (Phase creating, with the attachments made so far), oldest first: what
// the API lists, so that a pod is there from the instant its create is
// journaled. A creating pod no create runs for (a crash left it; the
// boot's reconcile rolls it back) is not listed, as List does not.
func (m *Manager) ListAll() []*state.Pod {
	m.mu.Lock()
	creating := make(map[string]bool, len(m.inflight))
	for id := range m.inflight {
		creating[id] = true
	}
	m.mu.Unlock()
	return m.opts.Store.FindPods(func(p *state.Pod) bool { return p.Phase != state.PhaseCreating || creating[p.ID] })
}

// Count is how many pods List would return, in constant time.
func (m *Manager) Count() int {
	n := 0
	for ph, c := range m.opts.Store.CountPods() {
		if ph != state.PhaseCreating {
			n += c
		}
	}
	return n
}

func (m *Manager) netnsPath(id string) string { return filepath.Join(m.opts.NetnsDir, id) }
func (m *Manager) podDir(id string) string    { return filepath.Join(m.opts.PodsDir, id) }

// checkNetns refuses a journaled pod whose id is not a UUID or whose netns
// is anywhere but <NetnsDir>/<id>: kurmad removes and flushes that path, so
// it must be one kurmad made, whatever the journal says.
func (m *Manager) checkNetns(rec *state.Pod) error {
	if uuid.Validate(rec.ID) != nil || rec.Netns != m.netnsPath(rec.ID) {
		return fmt.Errorf("pod %q: netns %q (want %q): %w", rec.ID, rec.Netns, m.netnsPath(rec.ID), ErrForeignNetns)
	}
	return nil
}

// teardownContext is a fresh context for one del: teardown must run even
// when the caller's context is cancelled (that is often why we roll back).
func (m *Manager) teardownContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := m.opts.TeardownTimeout
	if d <= 0 {
		d = netplugin.TimeoutOrDefault(m.config().PluginTimeout) + 30*time.Second
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// afterAnswer runs f in the background: the part of a delete its caller
// need not wait for (the pod's leftover links and its dir).
func (m *Manager) afterAnswer(f func()) { m.after.Go(f) }

// Wait waits for what deletes do after their answer (see removePod):
// once it returns, no pod deleted before it has a dir or links left.
// kurmad calls it before it stops.
func (m *Manager) Wait() { m.after.Wait() }
