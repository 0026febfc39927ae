package k8stest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// DirectNetpol is kurma's NetworkPolicy daemon (plugins/netpol,
// kurma-netpol) run on every node directly, with the admin's credentials,
// enforcing policy on the pods' cluster addresses: the policy half of the
// conformance baseline and of k8s-bench's policy rows, kurma's plugin
// image less kurma.
type DirectNetpol struct {
	// Binary is kurma-netpol (make netpol).
	Binary string
	// AdminNetworkPolicy and BaselineAdminNetworkPolicy turn on the
	// daemon's config keys of those names: it also enforces the
	// policy.networking.k8s.io v1alpha1 APIs, whose CRDs must be
	// installed before it starts.
	AdminNetworkPolicy, BaselineAdminNetworkPolicy bool
}

// NetpolReadyFile is where kurma-netpol says it enforces (informers
// synced, dataplane installed), on the node: its default for a network
// named "netpol".
const NetpolReadyFile = "/run/kurma-netpol/netpol.ready"

// NewDirectNetpol is the direct policy daemon from kurma's repository at
// repo.
func NewDirectNetpol(repo string) DirectNetpol {
	return DirectNetpol{Binary: filepath.Join(repo, "plugins/netpol/out/kurma-netpol")}
}

// Start runs the daemon on every node and waits until each enforces.
func (d DirectNetpol) Start(ctx context.Context, c *Cluster) error {
	if _, err := os.Stat(d.Binary); err != nil {
		return fmt.Errorf("the policy daemon: %w (make netpol)", err)
	}
	cfg := map[string]any{"name": "netpol", "policy_networks": []string{"cluster"}, "cluster_network": "cluster"}
	if d.AdminNetworkPolicy {
		cfg["admin_network_policy"] = true
	}
	if d.BaselineAdminNetworkPolicy {
		cfg["baseline_admin_network_policy"] = true
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		path := filepath.Join(n.Dir, "netpol.json")
		if err := os.WriteFile(path, conf, 0o644); err != nil {
			return err
		}
		if err := n.RunDaemon("kurma-netpol", []string{"NODE_NAME=" + n.Name}, d.Binary,
			"--config="+path, "--kubeconfig="+c.Kubeconfig, "--node-name="+n.Name); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.waitFor(ctx, 2*time.Minute, "the policy daemon on "+n.Name+" to enforce", n.daemonName("kurma-netpol"), func() error {
			_, err := os.Stat(n.Path(NetpolReadyFile))
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the daemon on every node; it removes its own tables.
func (d DirectNetpol) Stop(ctx context.Context, c *Cluster) error {
	var errs []error
	for _, n := range c.Nodes {
		if err := n.StopDaemon("kurma-netpol", 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
