package networkpod

import (
	"slices"
	"testing"
)

// TestTablesFixed: the default capability set and limits are handed out
// as copies; changing one changes no container's.
func TestTablesFixed(t *testing.T) {
	caps := Capabilities()
	caps[0] = "CAP_SYS_MODULE"
	if slices.Contains(Capabilities(), "CAP_SYS_MODULE") {
		t.Error("a caller changed the default capability set")
	}
	l := DefaultLimits()
	l.Pids = 1
	if DefaultLimits().Pids == 1 {
		t.Error("a caller changed the default limits")
	}
}
