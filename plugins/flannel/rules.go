package main

import (
	"context"
	"fmt"

	"github.com/flannel-io/flannel/pkg/ip"
	"github.com/flannel-io/flannel/pkg/lease"
	"github.com/flannel-io/flannel/pkg/subnet"
	"github.com/flannel-io/flannel/pkg/trafficmngr/nftables"
)

// setupRules makes flannel's nftables tables (flannel-ipv4, flannel-ipv6):
// forwarding accepted to and from the cluster networks, and with ipMasq
// the pods' traffic that leaves them masqueraded. Each call replaces the
// chains' rules, so a restarted flanneld takes over an earlier one's.
func setupRules(ctx context.Context, conf *subnet.Config, l *lease.Lease, ipMasq bool) error {
	nft := &nftables.NFTablesManager{}
	if err := nft.Init(ctx); err != nil {
		return err
	}
	if ipMasq {
		// nftables mode uses neither the previous subnets nor a resync
		// period (it flushes and refills its chain): zero values.
		err := nft.SetupAndEnsureMasqRules(ctx, conf.Network, ip.IP4Net{}, ip.IP4Net{},
			conf.IPv6Network, ip.IP6Net{}, ip.IP6Net{}, l, 0, false)
		if err != nil {
			return fmt.Errorf("masquerade rules: %w", err)
		}
	}
	// It logs its failures rather than returning them: forwarding is
	// accepted by default, these rules matter only under a drop policy.
	nft.SetupAndEnsureForwardRules(ctx, conf.Network, conf.IPv6Network, 0)
	return nil
}
