package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/flannel-io/flannel/pkg/backend"
	"github.com/flannel-io/flannel/pkg/backend/hostgw"
	"github.com/flannel-io/flannel/pkg/backend/vxlan"
	"github.com/flannel-io/flannel/pkg/subnet"
	"k8s.io/klog/v2"
)

// newBackend are the backends of kurma's flannel image, by the network
// config's Backend.Type (checkConfig's backendTypes).
var newBackend = map[string]func(subnet.Manager, *backend.ExternalInterface) (backend.Backend, error){
	"vxlan":   vxlan.New,
	"host-gw": hostgw.New,
}

// registerNetwork makes the backend's network: it leases the node's
// subnets and (vxlan) makes the flannel.<VNI> devices. Its goroutines run
// on ctx, counted in wg.
func registerNetwork(ctx context.Context, wg *sync.WaitGroup, sm subnet.Manager, ext *backend.ExternalInterface, conf *subnet.Config) (backend.Network, error) {
	typ := strings.ToLower(conf.BackendType)
	ctor, ok := newBackend[typ]
	if !ok {
		return nil, fmt.Errorf("network config: Backend.Type %q: no such backend", conf.BackendType)
	}
	be, err := ctor(sm, ext)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", typ, err)
	}
	bn, err := be.RegisterNetwork(ctx, wg, conf)
	if err != nil {
		return nil, fmt.Errorf("backend %s on %s: %w", typ, ext.IfaceName, err)
	}
	klog.InfoS("network registered", "backend", typ, "iface", ext.IfaceName, "publicIP", ext.ExtAddr, "publicIPv6", ext.ExtV6Addr)
	return bn, nil
}
