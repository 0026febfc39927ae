// Package k8snode runs kurma on a Kubernetes node, as the main program of
// kurma's DaemonSet container (cmd/kurma-node): it renders kurmad's config
// from a template and the Node's pod CIDR, runs kurmad, installs kurma-cni
// and its conflist into the node's CNI dirs once kurmad serves and every
// network the conflist names runs (and again should they go from the node
// while it runs), and removes them when kurma is uninstalled (its
// DaemonSet deleted), not when its pod is only replaced (a rolling
// update, a restart). It also answers the container's probes and
// prepares the node's mounts (MakeShared) in an init container.
package k8snode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
)

// networkCredentialsEnv tells kurmad the credentials root (networkpod's
// EnvCredentialsDir; k8snode links no part of kurmad).
const networkCredentialsEnv = "KURMA_CREDENTIALS_DIR"

// Node is one node's kurma: where its inputs are and what it runs.
type Node struct {
	// NodeName, PodName, PodNamespace are this pod's (the downward API).
	NodeName, PodName, PodNamespace string
	// Template is the kurmad config template (Placeholders); Config is
	// where the rendered config is written.
	Template, Config string
	// ClusterCIDRs are what __CLUSTER_CIDR__ and __CLUSTER_CIDRS__ stand
	// for (kurma-node run --cluster-cidrs).
	ClusterCIDRs []string
	// Kurmad is kurmad's path; KurmadArgs are added to --config Config.
	Kurmad     string
	KurmadArgs []string
	// CNI is kurma-cni's installation on the node.
	CNI CNI
	// Cluster reads the Node, this pod and its DaemonSet.
	Cluster *Cluster
	// Networks, when set, adds the cluster's Network objects to kurmad's
	// config and keeps them applied; AgentSocket is where it answers
	// kurma-cni (the conflist's "node_agent").
	Networks    *NetworkWatcher
	AgentSocket string
	// InstallNetworks is a file of Network objects (YAML or JSON, one or
	// more documents) the install brings, the cluster network first:
	// those missing are created when kurma-node starts (CreateMissing).
	InstallNetworks string
	// Credentials, when set, keeps the tokens of the networks with
	// kubernetes_credentials under its Root, which kurmad is told
	// (KURMA_CREDENTIALS_DIR); the first are written before kurmad starts.
	Credentials *Credentials
	// API is kurmad's API: the install waits for its networks' changes
	// (GET /v1/networks?wait=R), not on a timer (nil: every Poll).
	API *api.Client
	// Poll is the interval of the waits for the node (its pod CIDR, its
	// CNI files) and between failed installs; 0 → 1 s.
	Poll time.Duration
	Log  logrus.FieldLogger
}

// Run runs kurmad until it exits or ctx is cancelled (SIGTERM), installing
// kurma-cni once every network of the conflist runs, and again should it
// go from the node meanwhile (keepInstalled). On cancel it
// first decides whether kurma is being uninstalled (Uninstalling): if so
// it removes kurma-cni's conflist and binary and stops kurmad with its
// plugin containers (SIGUSR2); else it stops kurmad alone (SIGTERM: the
// plugin containers run on, and the pods keep their networks, for the next
// kurmad to adopt). It returns kurmad's exit error, nil when kurmad exited
// 0.
func (n *Node) Run(ctx context.Context) error {
	if n.Poll == 0 {
		n.Poll = time.Second
	}
	if err := n.writeConfig(ctx); err != nil {
		return err
	}
	cmd, err := n.startKurmad()
	if err != nil {
		return err
	}
	if n.Networks != nil {
		go n.Networks.Run(ctx)
		go func() {
			if err := n.Networks.ServeAgent(ctx, n.AgentSocket); err != nil {
				n.Log.WithError(err).WithField("socket", n.AgentSocket).Error("serving kurma-cni's access and attachment calls")
			}
		}()
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return n.supervise(ctx, cmd, exited)
}

// writeConfig writes kurmad's config for its start: the template rendered
// for this node, with the cluster's Network objects (the install's
// created first) when Networks is set, and the first tokens of its
// networks with credentials.
func (n *Node) writeConfig(ctx context.Context) error {
	cfg, in, err := n.renderConfig(ctx)
	if err != nil {
		return err
	}
	if n.Networks != nil {
		n.Networks.Start(ctx, 30*time.Second)
		if n.InstallNetworks != "" {
			// The install's Networks (the cluster network): created once,
			// then the objects are the truth.
			if err := n.Networks.CreateMissing(ctx, n.InstallNetworks, 30*time.Second); err != nil {
				n.Log.WithError(err).WithField("file", n.InstallNetworks).Error("creating the install's Network objects")
			}
		}
		if cfg, err = n.Networks.Render(ctx, cfg, in); err != nil {
			return err
		}
	}
	if n.Credentials != nil {
		names, err := CredentialedNetworks(cfg)
		if err != nil {
			return err
		}
		n.Credentials.Sync(ctx, names)
	}
	return writeAtomic(n.Config, bytes.NewReader(cfg), 0o600)
}

// startKurmad starts kurmad on Config, telling it where the pull
// secrets' credentials and the networks' tokens are.
func (n *Node) startKurmad() (*exec.Cmd, error) {
	args := append([]string{"--config", n.Config}, n.KurmadArgs...)
	cmd := exec.Command(n.Kurmad, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	if n.Networks != nil && n.Networks.AuthFile != "" {
		// kurmad reads the pull secrets' credentials at each fetch.
		cmd.Env = append(cmd.Env, "REGISTRY_AUTH_FILE="+n.Networks.AuthFile)
	}
	if n.Credentials != nil {
		cmd.Env = append(cmd.Env, networkCredentialsEnv+"="+n.Credentials.Root)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kurmad: %w", err)
	}
	n.Log.WithField("pid", cmd.Process.Pid).Info("kurmad started")
	return cmd, nil
}

// supervise keeps kurma-cni installed (keepInstalled) while kurmad runs,
// until kurmad exits (an error: it should not) or ctx ends (stop).
func (n *Node) supervise(ctx context.Context, cmd *exec.Cmd, exited <-chan error) error {
	installCtx, stopInstall := context.WithCancel(ctx)
	defer stopInstall()
	installed := make(chan error, 1)
	go func() { installed <- n.keepInstalled(installCtx) }()

	for {
		select {
		case err := <-exited:
			stopInstall()
			if err != nil {
				return fmt.Errorf("kurmad exited: %w", err)
			}
			return errors.New("kurmad exited on its own")
		case err := <-installed:
			installed = nil
			if err != nil && !errors.Is(err, context.Canceled) {
				n.Log.WithError(err).Error("installing kurma-cni")
			}
		case <-ctx.Done():
			// The installer must be done before stop may uninstall:
			// one still writing would put the conflist back after.
			stopInstall()
			if installed != nil {
				<-installed
			}
			return n.stop(cmd, exited)
		}
	}
}

// keepInstalled installs kurma-cni once the networks run
// (installWhenReady), then keeps it installed until ctx ends: a conflist
// or binary removed from the node while this kurmad runs (by a stopping
// kurma pod of a deleted DaemonSet while its replacement already runs, or
// by hand) goes back once the networks run. Without it the node would
// stay without kurma-cni, and this pod unready, for good. A conflist
// changed, not removed, is left alone: that is another kurma pod's (a
// surge rollout's), and two would otherwise take turns.
func (n *Node) keepInstalled(ctx context.Context) error {
	for {
		if err := n.installWhenReady(ctx); err != nil {
			return err
		}
		for n.CNI.present() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(n.Poll):
			}
		}
		n.Log.WithFields(logrus.Fields{
			"conflist": n.CNI.conflistPath(),
			"binary":   n.CNI.binaryPath(),
		}).Warn("kurma-cni or its conflist was removed from the node: installing it again")
	}
}

// stop is Run's end on SIGTERM: uninstall first when kurma is being
// removed (so no new sandbox is sent to a kurmad that is going), then stop
// kurmad, with its plugin containers when kurma is being removed, and wait
// for it.
func (n *Node) stop(cmd *exec.Cmd, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	uninstall, why := n.Uninstalling(ctx)
	cancel()
	if uninstall {
		if err := n.CNI.Uninstall(); err != nil {
			n.Log.WithError(err).Error("removing kurma-cni and its conflist")
		} else {
			n.Log.WithField("reason", why).Info("kurma is being uninstalled: removed kurma-cni and its conflist")
		}
		if n.Networks != nil {
			// No kurma-node of this node will take its finalizers off.
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n.Networks.DropFinalizers(fctx)
			cancel()
			// Its routes and rules are kurma-node's own: nothing else
			// would remove them (the plugins' bridges and tables stay,
			// docs/runtimes.md, "Upgrades, restarts and uninstalling").
			if err := n.Networks.Unroute(); err != nil {
				n.Log.WithError(err).Error("kurma is being uninstalled")
			} else {
				n.Log.Info("kurma is being uninstalled: removed the spanning Networks' routes and rules")
			}
		}
	} else {
		n.Log.WithField("reason", why).Info("stopping; kurma-cni stays installed for the next kurmad")
	}
	// SIGTERM leaves the plugin containers (flanneld, ...) running for the
	// next kurmad to adopt, so a rolling update restarts none; SIGUSR2
	// stops them too: kurma goes, and nothing of it may stay.
	sig := syscall.SIGTERM
	if uninstall {
		sig = syscall.SIGUSR2
	}
	_ = cmd.Process.Signal(sig)
	err := <-exited
	if n.Credentials != nil {
		// The networks' tokens stay for the next kurma-node (the plugin
		// containers keep running), unless kurma goes.
		if !uninstall {
			n.Credentials.Close()
		} else if rerr := n.Credentials.RemoveAll(); rerr != nil {
			n.Log.WithError(rerr).Error("removing the networks' credentials")
		}
	}
	if err != nil {
		return fmt.Errorf("kurmad exited: %w", err)
	}
	n.Log.Info("kurmad stopped")
	return nil
}

// Uninstalling decides, when this pod is stopped, whether kurma is being
// removed from the node, and says why: this pod's DaemonSet is gone or
// being deleted (kubectl delete of the DaemonSet, its namespace or the
// whole manifest), or kurma's access to the API is gone with its
// ServiceAccount or RBAC. A pod replaced by its DaemonSet (a rolling
// update, a restart) is not; neither is a pod that cannot tell (the API
// unreachable): removing the conflist then would fail every new pod on
// the node until the next kurmad installs it again.
func (n *Node) Uninstalling(ctx context.Context) (bool, string) {
	pod, err := n.Cluster.Pod(ctx, n.PodNamespace, n.PodName)
	if Gone(err) {
		return true, err.Error()
	}
	if err != nil {
		return false, "cannot tell whether kurma is uninstalled: " + err.Error()
	}
	var owner *OwnerReference
	for i, o := range pod.Metadata.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			owner = &pod.Metadata.OwnerReferences[i]
		}
	}
	if owner == nil {
		return false, "this pod has no DaemonSet"
	}
	ds, err := n.Cluster.DaemonSet(ctx, n.PodNamespace, owner.Name)
	switch {
	case Gone(err):
		return true, fmt.Sprintf("DaemonSet %s/%s: %v", n.PodNamespace, owner.Name, err)
	case err != nil:
		return false, "cannot tell whether kurma is uninstalled: " + err.Error()
	case ds.Metadata.UID != owner.UID:
		return true, fmt.Sprintf("DaemonSet %s/%s was replaced by another of that name", n.PodNamespace, owner.Name)
	case ds.Metadata.DeletionTimestamp != nil:
		return true, fmt.Sprintf("DaemonSet %s/%s is being deleted", n.PodNamespace, owner.Name)
	}
	return false, fmt.Sprintf("DaemonSet %s/%s stays: this pod is being replaced", n.PodNamespace, owner.Name)
}

// renderConfig is the template rendered for this node, waiting for the
// Node to have what the template's placeholders stand for (its pod CIDR,
// its InternalIP), and what it was rendered from.
func (n *Node) renderConfig(ctx context.Context) ([]byte, Input, error) {
	tmpl, err := os.ReadFile(n.Template)
	if err != nil {
		return nil, Input{}, fmt.Errorf("the config template: %w", err)
	}
	last := ""
	for {
		node, err := n.Cluster.Node(ctx, n.NodeName)
		var cfg []byte
		if err == nil {
			in := Input{Node: node, ClusterCIDRs: n.ClusterCIDRs}
			cfg, err = Render(tmpl, in)
			if err == nil {
				n.Log.WithFields(logrus.Fields{"node": n.NodeName, "pod_cidrs": podCIDRList(node), "config": n.Config}).Info("rendered kurmad's config")
				return cfg, in, nil
			}
		}
		// Each new reason is logged: the first may be passing (the API
		// server starting) and hide the one that stays (403: no RBAC).
		if err.Error() != last {
			last = err.Error()
			n.Log.WithError(err).WithField("node", n.NodeName).Warn("waiting for what the config template needs of the node")
		}
		select {
		case <-ctx.Done():
			return nil, Input{}, ctx.Err()
		case <-time.After(2 * n.Poll):
		}
	}
}

// installWhenReady waits until STATUS of the conflist passes (kurmad
// serves, every network it names runs), then installs kurma-cni. STATUS
// is asked again at each change of kurmad's networks (nextChange), not on
// a timer. An install that fails (a read-only or full CNI dir) is logged
// and retried every Poll, not given up: readiness stays false meanwhile,
// and the node must not stay without kurma-cni once the fault is mended.
func (n *Node) installWhenReady(ctx context.Context) error {
	lastStatus, lastInstall := "", ""
	start := time.Now()
	rev := ""
	for {
		wait := n.Poll
		err := Status(n.CNI.Conflist)
		if err == nil {
			if err = n.CNI.Install(); err == nil {
				break
			}
			if err.Error() != lastInstall {
				lastInstall = err.Error()
				n.Log.WithError(err).Error("the networks run, but installing kurma-cni failed; retrying")
			}
		} else {
			if err.Error() != lastStatus {
				lastStatus = err.Error()
				n.Log.WithField("status", lastStatus).Info("waiting for the conflist's networks to run before installing kurma-cni")
			}
			if wait, err = n.nextChange(ctx, &rev); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	n.Log.WithFields(logrus.Fields{
		"conflist": n.CNI.conflistPath(),
		"binary":   n.CNI.binaryPath(),
		"duration": time.Since(start).Round(time.Millisecond),
	}).Info("the networks run: installed kurma-cni and its conflist")
	return nil
}

// nextChange waits for kurmad's networks to change from revision *rev
// (at once for ""), and sets *rev to the new one. While kurmad cannot be
// reached (it is starting) it returns at once, with how long to wait
// before STATUS is asked again: Poll. An error only when ctx ended.
func (n *Node) nextChange(ctx context.Context, rev *string) (time.Duration, error) {
	if n.API == nil {
		return n.Poll, nil
	}
	_, r, err := n.API.WaitNetworks(ctx, *rev)
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if err != nil {
		return n.Poll, nil
	}
	*rev = r
	return 0, nil
}

// podCIDRList is the node's pod CIDRs for a log line.
func podCIDRList(node *NodeObject) string {
	if len(node.Spec.PodCIDRs) > 0 {
		return strings.Join(node.Spec.PodCIDRs, ",")
	}
	return node.Spec.PodCIDR
}
