package state

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Generation is the journal record of one generation of a network's
// plugin container: what it runs. A restarted kurmad runs a generation
// that journaled attachments still need from this record (for their
// dels), and gives a config entry whose Definition is unchanged the same
// generation again.
type Generation struct {
	Network    string `json:"network"`
	Generation int    `json:"generation"`
	// Definition identifies the config entry the generation was made for
	// (image URI and verification, capabilities, plugin config, limits).
	Definition string `json:"definition"`
	// Image is the ID of the image it runs, "" until the image is fetched.
	Image string `json:"image,omitempty"`
	// Config is its main executable's stdin.
	Config            []byte   `json:"config"`
	AllowCapabilities []string `json:"allow_capabilities,omitempty"`
	AllowSyscalls     []string `json:"allow_syscalls,omitempty"`
	// Limits bounds its container and each call in it; nil for the
	// defaults (and in records of a kurmad that journaled none).
	Limits *Limits `json:"limits,omitempty"`
	// MainSeesPods mounts the pods' netns dir in its container.
	MainSeesPods bool `json:"main_sees_pods,omitempty"`
	// KubernetesCredentials: the container gets kurmad's Kubernetes
	// credentials (netconfig's kubernetes_credentials).
	KubernetesCredentials bool `json:"kubernetes_credentials,omitempty"`
}

// Limits are a generation's bounds as journaled (netconfig.Limits: each
// a count or bytes; 0 is the default, -1 no bound).
type Limits struct {
	Pids          int64 `json:"pids,omitempty"`
	Memory        int64 `json:"memory,omitempty"`
	CallPids      int64 `json:"call_pids,omitempty"`
	CallMemory    int64 `json:"call_memory,omitempty"`
	Tmpfs         int64 `json:"tmpfs,omitempty"`
	WritableLayer int64 `json:"writable_layer,omitempty"`
	StateDir      int64 `json:"state_dir,omitempty"`
}

func generationKey(network string, gen int) string {
	// Network names never hold a '/'.
	return network + "/" + strconv.Itoa(gen)
}

// PutGeneration writes (creates or replaces) a generation's record.
func (s *Store) PutGeneration(g *Generation) error {
	b, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("journal: encode generation %s/%d: %w", g.Network, g.Generation, err)
	}
	k := generationKey(g.Network, g.Generation)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.appendLocked(kindPutGeneration, k, b); err != nil {
		return fmt.Errorf("journal: write generation %s/%d: %w", g.Network, g.Generation, err)
	}
	c := *g
	s.setGeneration(k, &c, b)
	return nil
}

// DeleteGeneration removes a generation's record; removing one that is not
// there is not an error.
func (s *Store) DeleteGeneration(network string, gen int) error {
	k := generationKey(network, gen)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gens[k] == nil {
		return nil
	}
	if err := s.appendLocked(kindDeleteGeneration, k, nil); err != nil {
		return fmt.Errorf("journal: delete generation %s/%d: %w", network, gen, err)
	}
	s.setGeneration(k, nil, nil)
	return nil
}

// Generations lists a copy of every generation record, by network and
// generation.
func (s *Store) Generations() ([]*Generation, error) {
	s.mu.RLock()
	out := make([]*Generation, 0, len(s.gens))
	for _, g := range s.gens {
		c := *g
		out = append(out, &c)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Generation) int {
		if c := strings.Compare(a.Network, b.Network); c != 0 {
			return c
		}
		return a.Generation - b.Generation
	})
	return out, nil
}
