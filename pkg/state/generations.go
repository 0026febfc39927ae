package state

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// Generation is the journal record of one generation of a network's
// plugin container: what it runs. A restarted kurmad runs a generation
// that journaled attachments still need from this record (for their
// dels), and gives a config entry whose Hash is unchanged the same
// generation again.
type Generation struct {
	Network    string `json:"network"`
	Generation int    `json:"generation"`
	// Hash is the hash of the config entry the generation was made for
	// (gendef.Definition.Hash).
	Hash string `json:"definition"`
	// Definition is what it runs, as the config entry defined it: its
	// keys are the record's (image: the image's ID, "" until it is
	// fetched; config, allow_capabilities, limits, ...). Where the image
	// came from is not kept: the hash covers it.
	gendef.Definition
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
