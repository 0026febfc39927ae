package daemon

import (
	"context"
	"encoding/json"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/podnet"
)

// DeleteRuntimePods is a runtime's DEL (kurma-cni): the pods of one
// attachment go through Delete; none is no error.
func (b backend) DeleteRuntimePods(ctx context.Context, ref api.RuntimeRef) ([]string, error) {
	ids, err := b.d.pods.DeleteRuntime(ctx, podnet.RuntimeRef(ref))
	return ids, apiError(err)
}

// GCRuntimePods is a runtime's GC (kurma-cni): the pods it made on its CNI
// network that it no longer lists are deleted.
func (b backend) GCRuntimePods(ctx context.Context, req api.GCRequest) ([]string, error) {
	valid := make([]podnet.RuntimeRef, len(req.ValidAttachments))
	for i, a := range req.ValidAttachments {
		valid[i] = podnet.RuntimeRef{ContainerID: a.ContainerID, Interface: a.Interface}
	}
	ids, err := b.d.pods.GCRuntime(ctx, req.Network, req.Owner, valid)
	return ids, apiError(err)
}

func runtimeConfig(in map[string]map[string]json.RawMessage) map[string]netconfig.RuntimeConfig {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]netconfig.RuntimeConfig, len(in))
	for network, rc := range in {
		out[network] = netconfig.RuntimeConfig(rc)
	}
	return out
}

func podRuntime(rt *api.Runtime) *podnet.Runtime {
	if rt == nil {
		return nil
	}
	r := podnet.Runtime(*rt)
	return &r
}

func wireRuntime(rt *podnet.Runtime) *api.Runtime {
	if rt == nil {
		return nil
	}
	r := api.Runtime(*rt)
	return &r
}
