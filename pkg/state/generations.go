package state

import (
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
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
	// (image URI and verification, capabilities, plugin config).
	Definition string `json:"definition"`
	// Image is the ID of the image it runs, "" until the image is fetched.
	Image string `json:"image,omitempty"`
	// Config is its main executable's stdin.
	Config            []byte   `json:"config"`
	AllowCapabilities []string `json:"allow_capabilities,omitempty"`
	AllowSyscalls     []string `json:"allow_syscalls,omitempty"`
	// KubernetesCredentials: the container gets kurmad's Kubernetes
	// credentials (netconfig's kubernetes_credentials).
	KubernetesCredentials bool `json:"kubernetes_credentials,omitempty"`
}

func generationKey(network string, gen int) []byte {
	// Network names never hold a '/'.
	return []byte(network + "/" + strconv.Itoa(gen))
}

// PutGeneration writes (creates or replaces) a generation's record.
func (s *Store) PutGeneration(g *Generation) error {
	b, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("journal: encode generation %s/%d: %w", g.Network, g.Generation, err)
	}
	if err := s.write(func(tx *bolt.Tx) error {
		return tx.Bucket(generationsBucket).Put(generationKey(g.Network, g.Generation), b)
	}); err != nil {
		return fmt.Errorf("journal: write generation %s/%d: %w", g.Network, g.Generation, err)
	}
	return nil
}

// DeleteGeneration removes a generation's record; removing one that is not
// there is not an error.
func (s *Store) DeleteGeneration(network string, gen int) error {
	if err := s.write(func(tx *bolt.Tx) error {
		return tx.Bucket(generationsBucket).Delete(generationKey(network, gen))
	}); err != nil {
		return fmt.Errorf("journal: delete generation %s/%d: %w", network, gen, err)
	}
	return nil
}

// Generations lists every generation record.
func (s *Store) Generations() ([]*Generation, error) {
	var out []*Generation
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(generationsBucket).ForEach(func(k, v []byte) error {
			g := new(Generation)
			if err := json.Unmarshal(v, g); err != nil {
				return fmt.Errorf("generation %s: decode: %w", k, err)
			}
			out = append(out, g)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal: list generations: %w", err)
	}
	return out, nil
}
