package cniwrap

import (
	"encoding/json"
	"fmt"
)

// takeRuntimeConfig removes the top-level "runtimeConfig" from a config and
// returns it apart, as libcni's CapabilityArgs. kurmad places a pod's
// capability arguments there (only those the config declares); libcni then
// injects into each plugin the ones that plugin declares, which is how a
// runtime's portMappings reach portmap inside a conflist. A config without
// one is returned unchanged.
func takeRuntimeConfig(conf []byte) ([]byte, map[string]any, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(conf, &top); err != nil {
		return conf, nil, nil // ParseConfig reports it
	}
	raw, ok := top["runtimeConfig"]
	if !ok {
		return conf, nil, nil
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, nil, fmt.Errorf("runtimeConfig: must be an object of capability arguments: %w", err)
	}
	delete(top, "runtimeConfig")
	rest, err := json.Marshal(top)
	if err != nil {
		return nil, nil, err
	}
	return rest, args, nil
}
