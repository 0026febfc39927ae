package daemon

import (
	"context"
	"encoding/json"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
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

// podRuntime is a create's runtime side (see podnet.CreateRequest): what
// the runtime says; kurmad sets the rest.
func podRuntime(rt *api.Runtime) *state.Runtime {
	if rt == nil {
		return nil
	}
	return &state.Runtime{Owner: rt.Owner, ContainerID: rt.ContainerID, Interface: rt.Interface, Network: rt.Network, Netns: rt.Netns}
}

func wireRuntime(rt *state.Runtime) *api.Runtime {
	if rt == nil {
		return nil
	}
	return &api.Runtime{Owner: rt.Owner, ContainerID: rt.ContainerID, Interface: rt.Interface, Network: rt.Network, Netns: rt.Netns,
		Dropped: rt.Dropped, DroppedAt: rt.DroppedAt}
}
