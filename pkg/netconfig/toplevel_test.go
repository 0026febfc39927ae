package netconfig

import (
	"slices"
	"testing"
)

// Every key the "unknown key" message lists must parse, and every key that
// parses must be listed: the two tables may not drift apart.
func TestTopLevelKeysAllParse(t *testing.T) {
	for _, k := range topLevelKeys {
		if topLevelParsers[k] == nil {
			t.Errorf("key %q is listed as known but has no parser", k)
		}
	}
	for k := range topLevelParsers {
		if !slices.Contains(topLevelKeys, k) {
			t.Errorf("key %q parses but is missing from topLevelKeys", k)
		}
	}
}
