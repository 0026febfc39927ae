package cniwrap

import (
	"encoding/json"
	"fmt"
)

// capabilityArgs returns the top-level "runtimeConfig" takeKeys took from a
// config, as libcni's CapabilityArgs. kurmad places a pod's capability
// arguments there (only those the config declares); libcni then injects
// into each plugin the ones that plugin declares, which is how a runtime's
// portMappings reach portmap inside a conflist. None taken is nil.
func capabilityArgs(taken map[string]json.RawMessage) (map[string]any, error) {
	raw, ok := taken[keyRuntimeConfig]
	if !ok {
		return nil, nil
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, fmt.Errorf("runtimeConfig: must be an object of capability arguments: %w", err)
	}
	return args, nil
}
