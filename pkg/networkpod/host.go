// Package networkpod is kurma's plugin host: one privileged libcontainer
// container per generation of each configured network, each running the
// network's plugin image, supervised and restarted with backoff, and the one
// way into them (Exec) used to run the plugins' add, del, check, gc and
// status. It knows nothing of pods: it runs a path with args and stdin in a
// named generation. (The original Kurma called this "the networking pod";
// in kurma "pod" is only a user's pod.)
package networkpod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Generation states reported by Status.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	// StateUnavailable: the container runs but its plugin's status says it
	// cannot serve adds (see Options.StatusPath); calls still run.
	StateUnavailable = "unavailable"
	StateFailed      = "failed"
	StateStopped     = "stopped"
)

// Options configures the plugin containers.
type Options struct {
	// RunDir holds libcontainer state (RunDir/containers), the netns
	// directory (RunDir/netns) and per-container runtime dirs
	// (RunDir/networks/<name>+<generation>: overlay upper/work/merged,
	// agent socket).
	RunDir string
	// StateDir holds plugin state that survives restarts:
	// StateDir/networks/<name> is mounted at /var/lib/cni.
	StateDir string
	// PluginTimeout bounds every Exec; default netplugin.DefaultTimeout (SetPluginTimeout
	// changes it).
	PluginTimeout time.Duration
	// AgentPath is the static kurma-agent binary bind-mounted into every
	// container; default: "kurma-agent" beside os.Executable().
	AgentPath string
	// InitPath is kurma-init, which starts the containers (starter.go);
	// default: "kurma-init" beside os.Executable().
	InitPath string
	Logger   logrus.FieldLogger

	// StopGrace is how long Stop waits after SIGTERM before SIGKILL;
	// default 5s.
	StopGrace time.Duration
	// RestartBase and RestartMax bound the exponential restart backoff of a
	// failed generation; defaults 1s and 60s.
	RestartBase, RestartMax time.Duration
	// OnCall, when set, hears of every call Exec made or refused and of
	// every status probe, once it returned (metrics and transcripts). It
	// runs on the caller's goroutine: it must be quick.
	OnCall func(*Call)
	// StatusPath is the image contract's optional readiness executable
	// (/opt/network/status). When a generation's image has it (Provides),
	// it runs with the generation's Spec.Config on stdin after each start,
	// before the generation is declared running, and every StatusInterval
	// while it runs; one that fails makes the generation unavailable, with
	// the plugin's message as reason, until one passes. "" → no probe.
	StatusPath string
	// StatusInterval is the time between status probes; default 30s
	// (SetStatusInterval changes it).
	StatusInterval time.Duration

	// CgroupParent is the cgroup (in every v1 hierarchy) under which the
	// containers' cgroups are made. Default "kurma" for the default RunDir
	// /run/kurma, else "kurma-<hash of RunDir>" so that daemons (and tests)
	// with different run dirs never see each other's containers.
	CgroupParent string

	// Kubernetes is what the networks with kubernetes_credentials get,
	// each its own credentials (KubernetesFromEnv); nil outside
	// Kubernetes.
	Kubernetes *Kubernetes

	// OnState, when set, is told every change of a generation's state
	// (StateRunning once it serves calls and its plugin is ready,
	// StateUnavailable while its plugin says it cannot serve adds, both
	// states in which calls run, ...), and of its plugin's reason to be
	// unavailable. It is called from the
	// generation's supervisor: it must return quickly and must not wait
	// for the Host (Remove, Stop) itself.
	OnState func(network string, generation int, state string)
}

// Spec is one generation of a network to run. A network may run several
// generations side by side (kurmad starts a new one when a network's
// image or plugin config changes, and keeps the older ones for the dels
// of the attachments they served); each has a container of its own, and
// all share the network's plugin state dir.
type Spec struct {
	Network    string
	Generation int
	// Definition is what the container runs, as the network's config
	// entry defines it (each field says what it does). Its Image is
	// required; zero Limits take DefaultLimits; KubernetesCredentials
	// without Options.Kubernetes, or without a token in the network's
	// credentials directory, fails the start (ErrNoKubernetes).
	gendef.Definition
}

func (s Spec) key() string { return containerKey(s.Network, s.Generation) }

// Status is a network generation's state as shown to users.
type Status struct {
	Network    string
	Generation int
	State      string // starting|running|unavailable|failed|stopped
	Image      string // image ID
	Restarts   int
	Pid        int
	Reason     string
	Since      time.Time
	// Trespass, when not empty, is the last time a call of this
	// generation ran while another pod's network namespace changed, and
	// what changed (trespass.go): the call failed.
	Trespass string
	// NextRetry is when a failed generation's container is started
	// again; zero when none is due.
	NextRetry time.Time
}

// Host is the plugin host: the set of plugin containers of one daemon,
// one per network generation.
type Host struct {
	opts Options
	log  logrus.FieldLogger

	pluginTimeout  atomic.Int64 // time.Duration; see SetPluginTimeout
	statusInterval atomic.Int64 // time.Duration; see SetStatusInterval

	capsOnce sync.Once
	caps     map[string]bool // kurmad's bounding set

	state    stateFS      // the networks' state dir filesystems (statedir.go)
	versions versionCache // the plugins' CNI versions by image (versions.go)

	// callCgroupKind forces the kind of the calls' cgroups (agent.CgroupV2
	// or agent.CgroupFreezer; tests run both on a hybrid host); "" picks.
	callCgroupKind string

	prepMu sync.Mutex // serializes prepare

	// watch tells the calls during which another pod changed
	// (trespass.go).
	watch *trespassWatch
	// uevents refuses plugins the net sysfs uevent files (uevent.go); nil
	// where fanotify is not to be had.
	uevents *ueventGuard

	// starter is kurma-init, which starts the containers.
	starter *starter

	mu      sync.Mutex
	gens    map[string]*generation // by containerKey
	order   []string               // keys, in Start order
	started bool                   // the host's dirs are made and stale containers gone
	stopped bool
	// survivors are the containers of a kurmad before this one that this
	// Host may adopt (adopt.go), by key, until a Start claims them or
	// Prune, Stop removes them.
	survivors map[string]*survivor
}

// New checks opts and fills in defaults; it starts nothing.
func New(opts Options) (*Host, error) {
	if opts.RunDir == "" || opts.StateDir == "" {
		return nil, errors.New("networkpod: RunDir and StateDir are required")
	}
	var err error
	if opts.RunDir, err = filepath.Abs(opts.RunDir); err != nil {
		return nil, fmt.Errorf("networkpod: run dir: %w", err)
	}
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, fmt.Errorf("networkpod: state dir: %w", err)
	}
	opts.PluginTimeout = netplugin.TimeoutOrDefault(opts.PluginTimeout)
	if opts.StopGrace <= 0 {
		opts.StopGrace = 5 * time.Second
	}
	if opts.RestartBase <= 0 {
		opts.RestartBase = time.Second
	}
	if opts.RestartMax <= 0 {
		opts.RestartMax = 60 * time.Second
	}
	if opts.StatusInterval <= 0 {
		opts.StatusInterval = 30 * time.Second
	}
	if opts.RestartMax < opts.RestartBase {
		opts.RestartMax = opts.RestartBase
	}
	if opts.AgentPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("networkpod: locating kurma-agent beside the executable: %w", err)
		}
		opts.AgentPath = filepath.Join(filepath.Dir(exe), "kurma-agent")
	}
	if _, err := os.Stat(opts.AgentPath); err != nil {
		return nil, fmt.Errorf("networkpod: exec agent: %w (build it with `CGO_ENABLED=0 go build -o %s ./cmd/kurma-agent`)", err, opts.AgentPath)
	}
	if opts.InitPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("networkpod: locating kurma-init beside the executable: %w", err)
		}
		opts.InitPath = filepath.Join(filepath.Dir(exe), "kurma-init")
	}
	if _, err := os.Stat(opts.InitPath); err != nil {
		return nil, fmt.Errorf("networkpod: kurma-init: %w (build it with `go build -o %s ./cmd/kurma-init`)", err, opts.InitPath)
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = defaultCgroupParent(opts.RunDir)
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.SetOutput(os.Stderr)
		opts.Logger = l
	}
	h := &Host{
		opts:    opts,
		log:     opts.Logger,
		gens:    make(map[string]*generation),
		starter: newStarter(opts.InitPath, opts.Logger),
	}
	h.SetPluginTimeout(opts.PluginTimeout)
	h.SetStatusInterval(opts.StatusInterval)
	if h.uevents, err = newUeventGuard(h.log); err != nil {
		h.log.WithError(err).Warn("plugins may write the network devices' uevent files: a uevent of their choosing reaches the host's udev")
	}
	if h.watch, err = newTrespassWatch(h.NetnsDir()); err != nil {
		h.log.WithError(err).Warn("no watch of the pods' network namespaces: a call that changes another pod's through the host's namespace ids goes unnoticed")
	}
	return h, nil
}

// SetPluginTimeout changes the limit of the calls that start from now on
// (a reload of the config); d <= 0 is ignored.
func (h *Host) SetPluginTimeout(d time.Duration) {
	if d > 0 {
		h.pluginTimeout.Store(int64(d))
	}
}

// SetStatusInterval changes the time between status probes, from each
// generation's next probe on (a reload of the config); d <= 0 is ignored.
func (h *Host) SetStatusInterval(d time.Duration) {
	if d > 0 {
		h.statusInterval.Store(int64(d))
	}
}

func (h *Host) statusEvery() time.Duration { return time.Duration(h.statusInterval.Load()) }

// NetnsDir is <RunDir>/netns, a shared bind mount once Start ran: network
// namespaces bind-mounted there are visible in every plugin container at the
// same path.
func (h *Host) NetnsDir() string { return filepath.Join(h.opts.RunDir, "netns") }

// Status returns every network generation's status in Start order.
func (h *Host) Status() []Status {
	gens := h.all()
	out := make([]Status, 0, len(gens))
	for _, n := range gens {
		out = append(out, n.status())
	}
	return out
}

// all returns every network generation in Start order.
func (h *Host) all() []*generation {
	h.mu.Lock()
	defer h.mu.Unlock()
	gens := make([]*generation, 0, len(h.order))
	for _, key := range h.order {
		gens = append(gens, h.gens[key])
	}
	return gens
}

func (h *Host) lookup(name string, generation int) (*generation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.gens[containerKey(name, generation)]
	if !ok {
		return nil, &netplugin.NetworkError{Network: name, Err: fmt.Errorf("%w %d", netplugin.ErrUnknownGeneration, generation)}
	}
	return n, nil
}

// Start starts one container per spec, concurrently, and returns once every
// one had its first start attempt (or ctx is done). A generation that fails to start is not an error of Start: it
// shows as failed in Status and is retried with backoff. Start returns an
// error only for what concerns the whole host (directories, the shared
// netns mount, a bad name, a generation started twice). The first Start
// removes the containers an earlier daemon left on the same RunDir; Start
// may be called again to add generations beside the running ones.
func (h *Host) Start(ctx context.Context, specs []Spec) error {
	if err := h.prepare(); err != nil {
		return err
	}
	gens, err := h.register(specs)
	if err != nil {
		return err
	}
	for _, n := range gens {
		go n.supervise()
	}
	for _, n := range gens {
		select {
		case <-n.firstDone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// register adds a generation per spec, refusing them all after Stop, with a
// bad name or no image, or for a generation already there.
func (h *Host) register(specs []Spec) ([]*generation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, errors.New("networkpod: Start after Stop")
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if s.Network == "" || strings.ContainsAny(s.Network, "/+\x00") || s.Network == "." || s.Network == ".." || s.Generation < 0 {
			return nil, fmt.Errorf("networkpod: bad network name %q (generation %d)", s.Network, s.Generation)
		}
		if s.Image == nil {
			return nil, fmt.Errorf("networkpod: network %q generation %d has no image", s.Network, s.Generation)
		}
		if _, dup := h.gens[s.key()]; dup || seen[s.key()] {
			return nil, fmt.Errorf("networkpod: network %q generation %d started twice", s.Network, s.Generation)
		}
		seen[s.key()] = true
	}
	gens := make([]*generation, 0, len(specs))
	for _, s := range specs {
		n := newGeneration(h, s)
		h.gens[n.key] = n
		h.order = append(h.order, n.key)
		gens = append(gens, n)
	}
	return gens, nil
}

// prepare makes the host's directories and shared netns mount, and, the
// first time, removes what an earlier daemon on this RunDir left.
func (h *Host) prepare() error {
	// Held throughout: a concurrent Start must not start a container while
	// the first one's cleanup takes everything on the RunDir for stale.
	h.prepMu.Lock()
	defer h.prepMu.Unlock()
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return errors.New("networkpod: Start after Stop")
	}
	first := !h.started
	h.started = true
	h.mu.Unlock()
	for _, d := range []string{h.opts.RunDir, h.containersRoot(), filepath.Join(h.opts.RunDir, "networks"), filepath.Join(h.opts.StateDir, "networks")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("networkpod: %w", err)
		}
	}
	if n := len(h.agentSocket(containerKey(strings.Repeat("x", 15), 9999))); n > 107 {
		return fmt.Errorf("networkpod: run dir %s is too long for unix socket paths under it", h.opts.RunDir)
	}
	if err := h.ensureSharedNetnsDir(); err != nil {
		return fmt.Errorf("networkpod: netns dir: %w", err)
	}
	if first {
		if err := h.cleanupStale(); err != nil {
			h.log.WithError(err).Warn("cleaning up containers of an earlier run")
		}
	}
	return nil
}

// cleanupStale sorts what an earlier kurmad left on this RunDir: the
// containers this Host may adopt (adopt.go) are kept, as survivors, for
// the Starts of their generations; every other container goes, with its
// cgroups and run dir. It runs before the first generation starts, so
// nothing there runs for this Host. A cgroup under the parent that this
// RunDir does not prove its own (ownership.go) is removed only when empty:
// another kurmad with the same cgroup parent may run in it.
func (h *Host) cleanupStale() error {
	stale := map[string]bool{}
	if entries, err := os.ReadDir(h.containersRoot()); err == nil {
		for _, e := range entries {
			if k, ok := strings.CutPrefix(e.Name(), "kurma-net-"); ok {
				stale[k] = true
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(h.opts.RunDir, "networks")); err == nil {
		for _, e := range entries {
			stale[e.Name()] = true
		}
	}
	for _, hier := range cgroupHierarchies() {
		entries, _ := os.ReadDir(filepath.Join(hier, h.opts.CgroupParent))
		for _, e := range entries {
			if k, ok := strings.CutPrefix(e.Name(), "kurma-net-"); ok && e.IsDir() {
				stale[k] = true
			}
		}
	}
	survivors := h.findSurvivors(stale)
	h.mu.Lock()
	h.survivors = survivors
	h.mu.Unlock()
	var errs []error
	for k := range stale {
		if survivors[k] != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(h.containersRoot(), containerID(k))); err == nil {
			h.log.WithField("container", containerID(k)).Info("removing the container of an earlier run")
		}
		if err := h.destroyContainer(k, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if len(survivors) == 0 {
		if err := h.removeCgroupParent(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RetryNow cuts a failed generation's restart backoff short: it starts
// again at once. It reports whether the generation was waiting to restart.
func (h *Host) RetryNow(name string, generation int) bool {
	n, err := h.lookup(name, generation)
	if err != nil {
		return false
	}
	n.mu.Lock()
	waiting := n.state == StateFailed && n.spec.Image != nil
	n.mu.Unlock()
	if !waiting {
		return false
	}
	select {
	case n.retry <- struct{}{}:
	default:
	}
	return true
}

// Remove stops one generation as Stop stops them all (SIGTERM, grace,
// SIGKILL, everything of its container removed) and forgets it: Status no
// longer lists it and its calls fail with netplugin.ErrUnknownGeneration.
func (h *Host) Remove(ctx context.Context, name string, generation int) error {
	n, err := h.lookup(name, generation)
	if err != nil {
		return err
	}
	n.requestStop()
	select {
	case <-n.done:
	case <-ctx.Done():
		return fmt.Errorf("networkpod: remove %s generation %d: %w", name, generation, ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.gens, n.key)
	for i, k := range h.order {
		if k == n.key {
			h.order = append(h.order[:i:i], h.order[i+1:]...)
			break
		}
	}
	return nil
}

// Stop stops every generation: SIGTERM to each main process, the grace period,
// SIGKILL, and removal of containers, mounts, overlay dirs and cgroups;
// the containers of an earlier kurmad that no Start adopted go too. The
// netns dir's bind mount is removed too unless pod namespaces are still
// mounted in it. Stop is final: a Host cannot be started again.
func (h *Host) Stop(ctx context.Context) error {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	gens := h.all()
	for _, n := range gens {
		n.requestStop()
	}
	h.Prune(nil)
	for _, n := range gens {
		select {
		case <-n.done:
		case <-ctx.Done():
			return fmt.Errorf("networkpod: stop: %w", ctx.Err())
		}
	}
	h.starter.close()
	h.watch.close()
	h.uevents.close()
	var errs []error
	if err := h.removeCgroupParent(); err != nil {
		errs = append(errs, err)
	}
	if err := h.releaseNetnsDir(); err != nil {
		errs = append(errs, err)
	}
	if err := h.releaseStateDirs(); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove(filepath.Join(h.opts.RunDir, "networks"))
	return errors.Join(errs...)
}

// Detach stops the Host and leaves its plugin containers running, for the
// next kurmad on this RunDir to adopt (adopt.go): each generation's
// supervision ends, kurmad lets go of its container (its watch, calls,
// seccomp listener, mount namespace) and writes its adoption record; a
// container still starting is removed. Mounts (the netns dir's, the state
// dirs', the overlays) and cgroups stay with the containers. Detach is
// final, as Stop is.
func (h *Host) Detach(ctx context.Context) error {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	gens := h.all()
	for _, n := range gens {
		n.detach()
	}
	for _, n := range gens {
		select {
		case <-n.done:
		case <-ctx.Done():
			return fmt.Errorf("networkpod: detach: %w", ctx.Err())
		}
	}
	h.mu.Lock()
	for _, sv := range h.survivors {
		sv.pidfd.Close() // not adopted: the next kurmad may
	}
	h.survivors = nil
	h.mu.Unlock()
	h.starter.close()
	h.watch.close()
	h.uevents.close()
	return nil
}

// abandonAll stops supervising without touching the containers, as if the
// daemon died: tests use it to leave containers behind.
func (h *Host) abandonAll() {
	h.mu.Lock()
	h.stopped = true
	gens := make([]*generation, 0, len(h.gens))
	for _, n := range h.gens {
		gens = append(gens, n)
	}
	h.mu.Unlock()
	for _, n := range gens {
		n.detach()
		<-n.done
	}
	h.starter.close()
}

// releaseNetnsDir removes the netns dir's bind mount when no pod namespace
// is mounted in it (those belong to pods that outlive the daemon). EBUSY
// right after the containers died is their mount namespaces going away.
func (h *Host) releaseNetnsDir() error {
	dir := h.NetnsDir()
	for i := range 40 {
		points, err := mountPointsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		for _, pt := range points {
			if pt != dir {
				h.log.WithField("dir", dir).Info("network namespaces still mounted; leaving the netns dir mounted")
				return nil
			}
		}
		err = unix.Unmount(dir, 0)
		if err == nil || errors.Is(err, unix.EINVAL) {
			continue
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("networkpod: unmount %s: %w", dir, err)
		}
		time.Sleep(time.Duration(i+1) * 2 * time.Millisecond)
	}
	return fmt.Errorf("networkpod: unmount %s: still busy", dir)
}
