package kurmacni

import (
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/kurma-project/kurma/pkg/api"
)

// mergeResults is ADD's one result: prev (what the plugins before
// kurma-cni in the runtime's chain gave, nil when it is first), then each
// network's result in attach order, as a chained plugin adds to its
// prevResult: interfaces appended (each IP's interface index moved along),
// IPs and routes appended, DNS servers, search domains and options
// gathered without repeats, the first domain kept.
//
// An interface kurmad reports in its bind mount of the runtime's netns
// (podNetns) is reported in the runtime's own path (netns), the one the
// runtime knows.
func mergeResults(prev types.Result, atts []api.Attachment, podNetns, netns string) (*current.Result, error) {
	out := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if prev != nil {
		r, err := current.NewResultFromResult(prev)
		if err != nil {
			return nil, fmt.Errorf("prevResult: %w", err)
		}
		appendResult(out, r)
	}
	for _, a := range atts {
		if len(a.Result) == 0 {
			return nil, fmt.Errorf("network %q: kurmad sent no result", a.Network)
		}
		r, err := create.Create(current.ImplementedSpecVersion, a.Result)
		if err != nil {
			return nil, fmt.Errorf("network %q: %w", a.Network, err)
		}
		cur, err := current.GetResult(r)
		if err != nil {
			return nil, fmt.Errorf("network %q: %w", a.Network, err)
		}
		for _, iface := range cur.Interfaces {
			if iface.Sandbox == podNetns {
				iface.Sandbox = netns
			}
		}
		appendResult(out, cur)
	}
	return out, nil
}

func appendResult(out, r *current.Result) {
	offset := len(out.Interfaces)
	out.Interfaces = append(out.Interfaces, r.Interfaces...)
	for _, ip := range r.IPs {
		c := *ip
		if c.Interface != nil {
			c.Interface = current.Int(*c.Interface + offset)
		}
		out.IPs = append(out.IPs, &c)
	}
	out.Routes = append(out.Routes, r.Routes...)
	if out.DNS.Domain == "" {
		out.DNS.Domain = r.DNS.Domain
	}
	out.DNS.Nameservers = appendNew(out.DNS.Nameservers, r.DNS.Nameservers)
	out.DNS.Search = appendNew(out.DNS.Search, r.DNS.Search)
	out.DNS.Options = appendNew(out.DNS.Options, r.DNS.Options)
}

func appendNew(dst, src []string) []string {
	for _, s := range src {
		if !slices.Contains(dst, s) {
			dst = append(dst, s)
		}
	}
	return dst
}
