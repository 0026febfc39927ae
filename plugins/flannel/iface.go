package main

import (
	"errors"
	"fmt"

	"github.com/flannel-io/flannel/pkg/backend"
	"github.com/flannel-io/flannel/pkg/ipmatch"
	"github.com/flannel-io/flannel/pkg/subnet"
	"k8s.io/klog/v2"
)

// externalInterface is the interface other nodes reach this one on, with
// its address of each family the network has: the first of ifaces (names
// or addresses) that has them, or with none given the default route's.
// Its addresses are the node's public ones (no --public-ip: kurma's image
// announces the interface's own).
func externalInterface(ifaces []string, conf *subnet.Config) (*backend.ExternalInterface, error) {
	stack, err := ipmatch.GetIPFamily(conf.EnableIPv4, conf.EnableIPv6)
	if err != nil {
		return nil, fmt.Errorf("network config: %w", err)
	}
	if len(ifaces) == 0 {
		ext, err := ipmatch.LookupExtIface("", "", "", stack, ipmatch.PublicIPOpts{})
		if err != nil {
			return nil, fmt.Errorf("the default route's interface: %w", err)
		}
		return ext, nil
	}
	var errs []error
	for _, name := range ifaces {
		ext, err := ipmatch.LookupExtIface(name, "", "", stack, ipmatch.PublicIPOpts{})
		if err == nil {
			return ext, nil
		}
		klog.InfoS("interface not usable, trying the next", "iface", name, "err", err)
		errs = append(errs, fmt.Errorf("--iface %s: %w", name, err))
	}
	return nil, fmt.Errorf("no usable interface: %w", errors.Join(errs...))
}
