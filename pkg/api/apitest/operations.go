package apitest

import (
	"context"
	"slices"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// Reload implements api.Backend: it reports every network unchanged.
func (b *Backend) Reload(ctx context.Context) (*api.ReloadResult, error) {
	if err := b.hook("Reload", ""); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return &api.ReloadResult{Config: "/etc/kurma/kurmad.json", Added: []string{}, Replaced: []string{},
		Retired: []string{}, Updated: []string{}, Unchanged: b.names()}, nil
}

// PlanReload implements api.Backend: Reload's answer, as a dry run.
func (b *Backend) PlanReload(ctx context.Context) (*api.ReloadResult, error) {
	if err := b.hook("PlanReload", ""); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return &api.ReloadResult{Config: "/etc/kurma/kurmad.json", Added: []string{}, Replaced: []string{},
		Retired: []string{}, Updated: []string{}, Unchanged: b.names(), DryRun: true}, nil
}

// RetryNetwork implements api.Backend: a failed network is fetching again.
func (b *Backend) RetryNetwork(ctx context.Context, name string) ([]api.Generation, error) {
	if err := b.hook("RetryNetwork", name); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.generation(name)
	if n == nil {
		return nil, api.Errorf(api.CodeUnknownNetwork, "unknown network %q", name)
	}
	if n.State == api.StateFailed {
		n.State, n.Reason, n.NextRetry = api.StateFetching, "", time.Time{}
	}
	return []api.Generation{*n}, nil
}

// RemovePod implements api.Backend: the pod goes; a pod whose Error is set
// leaves its first network, with that error.
func (b *Backend) RemovePod(ctx context.Context, id string) (*api.PodRemoval, error) {
	if err := b.hook("RemovePod", id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range b.pods {
		if p.ID == id {
			b.pods = slices.Delete(b.pods, i, i+1)
			res := &api.PodRemoval{ID: id, Left: []api.Leftover{}}
			if p.Error != "" && len(p.Attachments) > 0 {
				res.Left = append(res.Left, api.Leftover{Network: p.Attachments[0].Network, Interface: p.Attachments[0].Interface, Error: p.Error})
			}
			return res, nil
		}
	}
	return nil, api.Errorf(api.CodeNotFound, "pod %q not found", id)
}

// SetPodError sets a pod's error, as a delete that could not finish does.
func (b *Backend) SetPodError(id, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pods {
		if p.ID == id {
			p.Error = msg
		}
	}
}

// SetPodDropped marks a runtime pod as kurmad marks one whose runtime
// dropped it while its release runs.
func (b *Backend) SetPodDropped(id, why string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pods {
		if p.ID == id && p.Runtime != nil {
			p.Runtime.Dropped, p.Runtime.DroppedAt = why, at
		}
	}
}
