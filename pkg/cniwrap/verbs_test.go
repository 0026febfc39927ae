package cniwrap

import (
	"maps"
	"slices"
	"testing"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// TestEveryVerbRuns: the wrapper has a function for every verb of the
// contract, and for nothing else: netplugin.Verbs is the one list.
func TestEveryVerbRuns(t *testing.T) {
	have := slices.Sorted(maps.Keys(verbs))
	want := slices.Sorted(slices.Values(netplugin.VerbNames()))
	if !slices.Equal(have, want) {
		t.Errorf("the wrapper runs %v, the contract's verbs are %v", have, want)
	}
}
