package daemon

import (
	"slices"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/networks"
)

// wireGenerations is the networks' generations as the API answers them
// (GET /v1/networks): the controller keeps its own types, the daemon is
// the edge that speaks the wire's.
func wireGenerations(gens []networks.Status) []api.Generation {
	out := make([]api.Generation, 0, len(gens))
	for _, g := range gens {
		out = append(out, wireGeneration(g))
	}
	return out
}

// wireGeneration is g as the API answers it. The controller's states are
// the API's, word for word (TestGenerationStatesOnTheWire).
func wireGeneration(g networks.Status) api.Generation {
	return api.Generation{
		Network: g.Network, Generation: g.Generation, State: g.State, Image: g.Image, Restarts: g.Restarts,
		Pid: g.Pid, Reason: g.Reason, Default: g.Default, Pods: g.Pods, Role: g.Role,
		NetworkPolicy: g.NetworkPolicy, PolicyNetworks: g.PolicyNetworks, Since: g.Since, NextRetry: g.NextRetry,
		FetchedBytes: g.FetchedBytes, FetchTotalBytes: g.FetchTotalBytes, FetchStarted: g.FetchStarted,
		Trespass: g.Trespass,
	}
}

// wireChanges is what a reload of the config file at path changed (or
// would: dryRun) as the API answers it. Every list is sent, empty as [].
func wireChanges(c *networks.Changes, path string, dryRun bool) *api.ReloadResult {
	list := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return slices.Clone(l)
	}
	res := &api.ReloadResult{Config: path, DryRun: dryRun, Added: list(c.Added), Replaced: list(c.Replaced),
		Retired: list(c.Retired), Updated: list(c.Updated), Unchanged: list(c.Unchanged)}
	if len(c.Keys) > 0 {
		res.Changes = c.Keys
	}
	return res
}
