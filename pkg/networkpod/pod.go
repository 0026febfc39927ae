// Package networkpod runs kurma's privileged networking pod: one
// libcontainer container per configured network, each running the
// network's plugin image, supervised and restarted with backoff, and the one
// way into them (Exec) used to run the plugins' add and del.
package networkpod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch"
)

// Network states reported by Status.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateFailed   = "failed"
	StateStopped  = "stopped"
)

// Options configures a Pod.
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
}

// Status is a network's state as shown to users.
type Status struct {
	Name     string    `json:"name"`
	State    string    `json:"state"` // starting|running|failed|stopped
	Image    string    `json:"image"` // image ID
	Restarts int       `json:"restarts"`
	Pid      int       `json:"pid"`
	Reason   string    `json:"reason"`
	Since    time.Time `json:"since"`
}

// Pod is the networking pod: the set of network containers of one daemon.
type Pod struct {
	opts Options
	log  logrus.FieldLogger

	capsOnce sync.Once
	caps     []string

	mu       sync.Mutex
	networks map[string]*network
	order    []string
	stopped  bool
}

// New checks opts and fills in defaults; it starts nothing.
func New(opts Options) (*Pod, error) {
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
	return &Pod{
		opts:     opts,
		log:      opts.Logger,
		networks: make(map[string]*network),
	}, nil
}

// NetnsDir is <RunDir>/netns, a shared bind mount once Start ran: network
// namespaces bind-mounted there are visible in every network container at the
// same path.
func (p *Pod) NetnsDir() string { return filepath.Join(p.opts.RunDir, "netns") }

// Status returns every network's status in Start order.
func (p *Pod) Status() []Status {
	p.mu.Lock()
	nets := make([]*network, 0, len(p.order))
	for _, name := range p.order {
		nets = append(nets, p.networks[name])
	}
	p.mu.Unlock()
	out := make([]Status, 0, len(nets))
	for _, n := range nets {
		out = append(out, n.status())
	}
	return out
}

func (p *Pod) lookup(name string) (*network, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.networks[name]
	if !ok {
		return nil, fmt.Errorf("network %q: %w", name, ErrUnknownNetwork)
	}
	return n, nil
}
