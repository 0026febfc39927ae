// Package networkpod runs kurma's privileged networking pod: one
// libcontainer container per configured network, each running the
// network's plugin image, supervised and restarted with backoff, and the one
// way into them (Exec) used to run the plugins' add and del.
package networkpod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// Network states reported by Status.
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
	// directory (RunDir/netns) and per-network runtime dirs
	// (RunDir/networks/<name>: overlay upper/work/merged, agent socket).
	RunDir string
	// StateDir holds plugin state that survives restarts:
	// StateDir/networks/<name> is mounted at /var/lib/cni.
	StateDir string
	// PluginTimeout bounds every Exec; default 1m.
	PluginTimeout time.Duration
	// AgentPath is the static kurma-agent binary bind-mounted into every
	// container; default: "kurma-agent" beside os.Executable().
	AgentPath string
	Logger    logrus.FieldLogger

	// StopGrace is how long Stop waits after SIGTERM before SIGKILL;
	// default 5s.
	StopGrace time.Duration
	// RestartBase and RestartMax bound the exponential restart backoff of a
	// failed network; defaults 1s and 60s.
	RestartBase, RestartMax time.Duration
	// OnCall, when set, hears of every call Exec made or refused and of
	// every status probe, once it returned (metrics and transcripts). It
	// runs on the caller's goroutine: it must be quick.
	OnCall func(*Call)
	// StatusPath is the image contract's optional readiness executable
	// (/opt/network/status). When a network's image has it (Provides), it
	// runs with the network's Spec.Config on stdin after each start, before
	// the network is declared running, and every StatusInterval while it
	// runs; one that fails makes the network unavailable, with the
	// plugin's message as reason, until one passes. "" → no probe.
	StatusPath string
	// StatusInterval is the time between status probes; default 30s.
	StatusInterval time.Duration

	// CgroupParent is the cgroup (in every v1 hierarchy) under which the
	// containers' cgroups are made. Default "kurma" for the default RunDir
	// /run/kurma, else "kurma-<hash of RunDir>" so that daemons (and tests)
	// with different run dirs never see each other's containers.
	CgroupParent string
}

// Spec is one network to run.
type Spec struct {
	Name   string
	Image  *imagefetch.Image // nil when Err != nil
	Config []byte            // main executable's stdin (netconfig Network.PluginConfig(nil))
	Err    error             // image could not be fetched: network shows failed with this reason
	// AllowCapabilities are the capabilities beyond the default set the
	// network consents to grant when its image asks for them
	// (netconfig Network.AllowCapabilities).
	AllowCapabilities []string
}

// Status is a network's state as shown to users.
type Status struct {
	Name     string    `json:"name"`
	State    string    `json:"state"` // starting|running|unavailable|failed|stopped
	Image    string    `json:"image"` // image ID
	Restarts int       `json:"restarts"`
	Pid      int       `json:"pid"`
	Reason   string    `json:"reason"`
	Since    time.Time `json:"since"`
}

// Containers is the networking pod: the set of plugin containers of one
// daemon, one per network. ("Pod" elsewhere in kurma is always a user's pod.)
type Containers struct {
	opts Options
	log  logrus.FieldLogger

	capsOnce sync.Once
	caps     map[string]bool // kurmad's bounding set

	// callCgroupKind forces the kind of the calls' cgroups (agent.CgroupV2
	// or agent.CgroupFreezer; tests run both on a hybrid host); "" picks.
	callCgroupKind string

	mu       sync.Mutex
	networks map[string]*network
	order    []string
	stopped  bool
}

// New checks opts and fills in defaults; it starts nothing.
func New(opts Options) (*Containers, error) {
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
	if opts.PluginTimeout <= 0 {
		opts.PluginTimeout = time.Minute
	}
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
	if opts.CgroupParent == "" {
		opts.CgroupParent = defaultCgroupParent(opts.RunDir)
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.SetOutput(os.Stderr)
		opts.Logger = l
	}
	return &Containers{
		opts:     opts,
		log:      opts.Logger,
		networks: make(map[string]*network),
	}, nil
}

// NetnsDir is <RunDir>/netns, a shared bind mount once Start ran: network
// namespaces bind-mounted there are visible in every network container at the
// same path.
func (cs *Containers) NetnsDir() string { return filepath.Join(cs.opts.RunDir, "netns") }

// Status returns every network's status in Start order.
func (cs *Containers) Status() []Status {
	cs.mu.Lock()
	nets := make([]*network, 0, len(cs.order))
	for _, name := range cs.order {
		nets = append(nets, cs.networks[name])
	}
	cs.mu.Unlock()
	out := make([]Status, 0, len(nets))
	for _, n := range nets {
		out = append(out, n.status())
	}
	return out
}

func (cs *Containers) lookup(name string) (*network, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n, ok := cs.networks[name]
	if !ok {
		return nil, &netconfig.NetworkError{Network: name, Err: ErrUnknownNetwork}
	}
	return n, nil
}

// Start starts one container per spec, concurrently, and returns once every
// network had its first start attempt (or ctx is done). A network that fails
// to start is not an error of Start: it shows as failed in Status and is
// retried with backoff. Start returns an error only for what concerns the
// whole pod (directories, the shared netns mount, a duplicate name).
// Containers left by an earlier daemon on the same RunDir are removed first.
func (cs *Containers) Start(ctx context.Context, specs []Spec) error {
	cs.mu.Lock()
	if cs.stopped {
		cs.mu.Unlock()
		return errors.New("networkpod: Start after Stop")
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if s.Name == "" || strings.ContainsAny(s.Name, "/\x00") || s.Name == "." || s.Name == ".." {
			cs.mu.Unlock()
			return fmt.Errorf("networkpod: bad network name %q", s.Name)
		}
		if _, dup := cs.networks[s.Name]; dup || seen[s.Name] {
			cs.mu.Unlock()
			return fmt.Errorf("networkpod: network %q started twice", s.Name)
		}
		seen[s.Name] = true
	}
	cs.mu.Unlock()

	for _, d := range []string{cs.opts.RunDir, cs.containersRoot(), filepath.Join(cs.opts.RunDir, "networks"), filepath.Join(cs.opts.StateDir, "networks")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("networkpod: %w", err)
		}
	}
	if n := len(cs.agentSocket(strings.Repeat("x", 15))); n > 107 {
		return fmt.Errorf("networkpod: run dir %s is too long for unix socket paths under it", cs.opts.RunDir)
	}
	if err := cs.ensureSharedNetnsDir(); err != nil {
		return fmt.Errorf("networkpod: netns dir: %w", err)
	}
	if err := cs.cleanupStale(seen); err != nil {
		cs.log.WithError(err).Warn("cleaning up containers of an earlier run")
	}

	nets := make([]*network, 0, len(specs))
	cs.mu.Lock()
	for _, s := range specs {
		n := &network{
			containers: cs, spec: s,
			log:       cs.log.WithField("network", s.Name),
			state:     StateStarting,
			since:     time.Now(),
			stop:      make(chan struct{}),
			abandon:   make(chan struct{}),
			done:      make(chan struct{}),
			firstDone: make(chan struct{}),
		}
		cs.networks[s.Name] = n
		cs.order = append(cs.order, s.Name)
		nets = append(nets, n)
	}
	cs.mu.Unlock()
	for _, n := range nets {
		go n.supervise()
	}
	for _, n := range nets {
		select {
		case <-n.firstDone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// cleanupStale removes every container, cgroup and run dir on this RunDir
// that no running network of these Containers owns: what a daemon that died left.
func (cs *Containers) cleanupStale(names map[string]bool) error {
	stale := map[string]bool{}
	for n := range names {
		stale[n] = true
	}
	if entries, err := os.ReadDir(cs.containersRoot()); err == nil {
		for _, e := range entries {
			if n, ok := strings.CutPrefix(e.Name(), "kurma-net-"); ok {
				stale[n] = true
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(cs.opts.RunDir, "networks")); err == nil {
		for _, e := range entries {
			stale[e.Name()] = true
		}
	}
	for _, h := range cgroupHierarchies() {
		entries, _ := os.ReadDir(filepath.Join(h, cs.opts.CgroupParent))
		for _, e := range entries {
			if n, ok := strings.CutPrefix(e.Name(), "kurma-net-"); ok && e.IsDir() {
				stale[n] = true
			}
		}
	}
	cs.mu.Lock()
	for n := range cs.networks {
		delete(stale, n)
	}
	cs.mu.Unlock()
	var errs []error
	for n := range stale {
		if _, err := os.Stat(filepath.Join(cs.containersRoot(), containerID(n))); err == nil {
			cs.log.WithField("network", n).Info("removing the container of an earlier run")
		}
		if err := cs.destroyContainer(n, nil); err != nil {
			errs = append(errs, err)
		}
	}
	// With no network of ours running (the first Start), nothing can be
	// creating a container under the parent now.
	cs.mu.Lock()
	first := len(cs.networks) == 0
	cs.mu.Unlock()
	if first {
		if err := cs.removeCgroupParent(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop stops every network: SIGTERM to each main process, the grace period,
// SIGKILL, and removal of containers, mounts, overlay dirs and cgroups. The
// netns dir's bind mount is removed too unless pod namespaces are still
// mounted in it. Stop is final: Containers cannot be started again.
func (cs *Containers) Stop(ctx context.Context) error {
	cs.mu.Lock()
	cs.stopped = true
	nets := make([]*network, 0, len(cs.networks))
	for _, name := range cs.order {
		nets = append(nets, cs.networks[name])
	}
	cs.mu.Unlock()
	for _, n := range nets {
		select {
		case <-n.stop:
		default:
			close(n.stop)
		}
	}
	for _, n := range nets {
		select {
		case <-n.done:
		case <-ctx.Done():
			return fmt.Errorf("networkpod: stop: %w", ctx.Err())
		}
	}
	var errs []error
	if err := cs.removeCgroupParent(); err != nil {
		errs = append(errs, err)
	}
	if err := cs.releaseNetnsDir(); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove(filepath.Join(cs.opts.RunDir, "networks"))
	return errors.Join(errs...)
}

// abandonAll stops supervising without touching the containers, as if the
// daemon died: tests use it to leave stale state behind.
func (cs *Containers) abandonAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.stopped = true
	for _, n := range cs.networks {
		close(n.abandon)
	}
}

// releaseNetnsDir removes the netns dir's bind mount when no pod namespace
// is mounted in it (those belong to pods that outlive the daemon). EBUSY
// right after the containers died is their mount namespaces going away.
func (cs *Containers) releaseNetnsDir() error {
	dir := cs.NetnsDir()
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
				cs.log.WithField("dir", dir).Info("network namespaces still mounted; leaving the netns dir mounted")
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
