// Package k8stest runs a Kubernetes cluster (built from the pinned release
// in this module) on this machine for `make k8s-test` and `make
// k8s-bench`, and leaves nothing behind: one node, described below, or N
// nodes (Options.Nodes), each in network, mount and cgroup namespaces of
// its own around a hub network namespace holding the control plane
// (node.go, nodens.go; docs/runtimes.md says how).
//
// The node is a private mount namespace: the program re-executes itself
// in one (EnterNodeNamespace) and mounts there, over the standard paths,
// directories of its own: a tmpfs on /run (containerd's shim sockets and
// runc state, the runtime's /run/netns, kurma's /run/kurma), and binds on
// /etc/cni/net.d, /opt/cni/bin, /var/lib/cni, /var/lib/kurma,
// /var/lib/kubelet and /var/log. containerd and the kubelet run in that
// namespace, so the DaemonSet's hostPaths, which containerd resolves,
// name the standard paths of a normal node, unedited, while nothing of
// the cluster is visible to the rest of the machine. Like the machine it
// runs on, the namespace's mounts are private (no systemd made / shared):
// the DaemonSet's init container makes the shared mounts kurma needs.
//
// What the namespace cannot hold is cleaned up by Cluster.Close: the
// processes (the program is their subreaper, so the shims and containers
// stay its descendants), the links, nftables tables and cgroups made
// while the cluster ran (found by comparing with a snapshot taken before,
// under the kernel-test lock), and the mount-point directories it had to
// create on the host.
package k8stest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	nsEnv = "KURMA_K8S_NODE_NS"
	// hubEnv says the program's network namespace is its own (the hub's
	// of an N-node cluster).
	hubEnv = "KURMA_K8S_HUB"
	// NodesEnv is the number of nodes (Options.Nodes) `make k8s-test`
	// and `make k8s-bench` run.
	NodesEnv = "K8S_NODES"
	// stateEnv names the file where the child keeps what its teardown
	// must undo in the kernel, for the parent when the child could not
	// (killed, or go test's timeout, which runs no cleanup).
	stateEnv = "KURMA_K8S_STATE"
)

// NodesFromEnv is the number of nodes $K8S_NODES asks for (1 when unset).
func NodesFromEnv() (int, error) {
	s := os.Getenv(NodesEnv)
	if s == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a number of nodes, 1 or more", NodesEnv, s)
	}
	return n, nil
}

// EnterNodeNamespace re-executes the program in a mount namespace of its
// own (mounts private) and exits with its status; in that namespace it
// returns at once. With K8S_NODES of 2 or more the namespace has a
// network namespace of its own too: the hub of an N-node cluster. Call it
// first thing in main or TestMain: it also runs a node's holder (see
// startHolder).
func EnterNodeNamespace() {
	if spec := os.Getenv(holderEnv); spec != "" {
		runHolder(spec)
	}
	if os.Getenv(nsEnv) == "1" {
		closeOnSignal()
		return
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "k8s-test: needs root (a node's containerd, kubelet and kurmad)")
		os.Exit(1)
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	state, err := os.CreateTemp("", "kurma-k8s-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-test:", err)
		os.Exit(1)
	}
	state.Close()
	os.Remove(state.Name()) // the child writes it once it has something to undo
	cmd.Env = append(os.Environ(), nsEnv+"=1", stateEnv+"="+state.Name())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Go makes / rprivate in the child after unsharing the namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	nodes, err := NodesFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-test:", err)
		os.Exit(1)
	}
	if nodes >= 2 {
		cmd.SysProcAttr.Unshareflags |= syscall.CLONE_NEWNET
		cmd.Env = append(cmd.Env, hubEnv+"=1")
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// Should the child die without its teardown (SIGKILL), what it
	// started comes here rather than to init, and is killed below: the
	// namespace, and its mounts, go with the last of them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "k8s-test: entering a mount namespace of its own:", err)
		os.Exit(1)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	if killed, kerr := killDescendants(20 * time.Second); len(killed) > 0 || kerr != nil {
		fmt.Fprintf(os.Stderr, "k8s-test: killed what the test left running: %v %v\n", killed, kerr)
	}
	cleanAfter(state.Name())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-test:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// active are the clusters started and not closed yet.
var active = struct {
	sync.Mutex
	clusters map[*Cluster]bool
}{clusters: map[*Cluster]bool{}}

// closeOnSignal tears down every active cluster on SIGINT, SIGTERM or
// SIGHUP (the parent forwards them), then exits.
func closeOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "k8s-test: %v: tearing the cluster down\n", s)
		active.Lock()
		var cs []*Cluster
		for c := range active.clusters {
			cs = append(cs, c)
		}
		active.Unlock()
		for _, c := range cs {
			if err := c.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "k8s-test: teardown:", err)
			}
		}
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
}
