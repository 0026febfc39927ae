package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/flannel-io/flannel/pkg/lease"
	"github.com/flannel-io/flannel/pkg/subnet"
	"k8s.io/klog/v2"
)

// run puts the node on the overlay and keeps it there until ctx ends
// (nil) or something fails (the error): it leases the node's subnets,
// makes the backend's devices and routes, its nftables rules, writes
// subnet.env, and completes the lease (on Kubernetes, marks the Node's
// network available).
func run(ctx context.Context, o options) error {
	ctx, cancel := context.WithCancel(ctx)
	// The backend and the subnet manager run goroutines on ctx: wait for
	// them, so that nothing is mid-change to the node's routes at exit.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	sm, err := newSubnetManager(ctx, o)
	if err != nil {
		// "SubnetManager": the word kurma's tests look for in this failure.
		return fmt.Errorf("cannot create the SubnetManager: %w", err)
	}
	klog.InfoS("subnet manager", "name", sm.Name())
	conf, err := networkConfig(ctx, sm)
	if err != nil {
		return err
	}
	ext, err := externalInterface(o.ifaces, conf)
	if err != nil {
		return err
	}
	bn, err := registerNetwork(ctx, &wg, sm, ext, conf)
	if err != nil {
		return err
	}
	l := bn.Lease()
	if err := setupRules(ctx, conf, l, o.ipMasq); err != nil {
		return err
	}
	// subnet.env is what the CNI side waits for: without it the node
	// never serves, so failing to write it is failing.
	if err := sm.HandleSubnetFile(o.subnetFile, conf, o.ipMasq, l.Subnet, l.IPv6Subnet, bn.MTU()); err != nil {
		return fmt.Errorf("subnet file %s: %w", o.subnetFile, err)
	}
	klog.InfoS("wrote subnet file", "path", o.subnetFile, "subnet", l.Subnet, "ipv6Subnet", l.IPv6Subnet, "mtu", bn.MTU())

	wg.Add(1)
	go func() {
		defer wg.Done()
		bn.Run(ctx)
	}()
	if err := completeLease(ctx, &wg, sm, l, o.kubeSubnetMgr); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// completeLease hands the lease to the subnet manager. The kube one marks
// the Node's network available and returns; a failure there is logged, as
// the overlay works without it. The etcd one renews the lease until ctx
// ends: its returning before is the lease lost.
func completeLease(ctx context.Context, wg *sync.WaitGroup, sm subnet.Manager, l *lease.Lease, kube bool) error {
	err := sm.CompleteLease(ctx, l, wg)
	switch {
	case ctx.Err() != nil:
		return nil
	case kube && err != nil:
		klog.ErrorS(err, "cannot mark the node's network available")
	case kube:
		klog.InfoS("node's network marked available")
	default:
		return fmt.Errorf("etcd lease of %s ended: %v", l.Subnet, err)
	}
	return nil
}
