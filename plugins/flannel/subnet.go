package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flannel-io/flannel/pkg/ip"
	"github.com/flannel-io/flannel/pkg/subnet"
	"github.com/flannel-io/flannel/pkg/subnet/etcd"
	"github.com/flannel-io/flannel/pkg/subnet/kube"
	"k8s.io/klog/v2"
)

const (
	// annotationPrefix is flannel's Node annotation prefix (backend-type,
	// public-ip, ...), which other nodes' flanneld read.
	annotationPrefix = "flannel.alpha.coreos.com"
	// leaseRenewMargin is how long, in minutes, before an etcd lease
	// expires that it is renewed (flannel's default).
	leaseRenewMargin = 60
	// configRetry is how often an absent network config is asked again
	// (etcd: a config not written yet).
	configRetry = time.Second
)

// newSubnetManager is the kube subnet manager (the node's lease is its
// Node's spec.podCIDRs; NODE_NAME names the Node), or without
// --kube-subnet-mgr etcd's.
func newSubnetManager(ctx context.Context, o options) (subnet.Manager, error) {
	if o.kubeSubnetMgr {
		// true: mark the Node's network available once the lease is complete.
		return kube.NewSubnetManager(ctx, o.kubeAPIURL, o.kubeconfig, annotationPrefix, o.netConfPath, true)
	}
	cfg := &etcd.EtcdConfig{Endpoints: strings.Split(o.etcdEndpoints, ","), Prefix: o.etcdPrefix}
	// No previous subnet: etcd's manager finds the lease of the node's
	// public address by itself.
	return etcd.NewLocalManager(ctx, cfg, ip.IP4Net{}, ip.IP6Net{}, leaseRenewMargin)
}

// networkConfig is the network's config from the subnet manager, asked
// until there is one or ctx ends, and checked against what this flanneld
// has.
func networkConfig(ctx context.Context, sm subnet.Manager) (*subnet.Config, error) {
	for {
		conf, err := sm.GetNetworkConfig(ctx)
		if err == nil && conf != nil {
			return conf, checkConfig(conf)
		}
		klog.InfoS("no network config yet", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(configRetry):
		}
	}
}

// backendTypes are the backends this flanneld has (registerNetwork).
var backendTypes = []string{"vxlan", "host-gw"}

// checkConfig fails a network config this flanneld cannot serve, naming
// the field.
func checkConfig(conf *subnet.Config) error {
	if !slices.Contains(backendTypes, strings.ToLower(conf.BackendType)) {
		return fmt.Errorf("network config: Backend.Type %q: this flanneld has %s only", conf.BackendType, strings.Join(backendTypes, " and "))
	}
	if !conf.EnableNFTables {
		return fmt.Errorf("network config: EnableNFTables is false: this flanneld has nftables mode only")
	}
	if !conf.EnableIPv4 && !conf.EnableIPv6 {
		return fmt.Errorf("network config: EnableIPv4 and EnableIPv6 are both false")
	}
	return nil
}
