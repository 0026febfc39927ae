package netconfig

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/sys/capability"
)

// knownCapabilities are the capability names allow_capabilities accepts, as
// the kernel spells them ("CAP_NET_ADMIN").
var knownCapabilities = func() []string {
	var out []string
	for _, c := range capability.ListKnown() {
		out = append(out, "CAP_"+strings.ToUpper(c.String()))
	}
	return out
}()

// parseAllowCapabilities reads a network's allow_capabilities: the
// capabilities beyond kurma's default set that the operator consents to
// grant the network's plugin container when its image asks for them.
func parseAllowCapabilities(ps *problems, path string, raw json.RawMessage) []string {
	const want = `a list of capability names such as ["CAP_BPF", "CAP_SYS_MODULE"]`
	return decodeNames(ps, path, raw, want, knownCapabilities, func(name string) string {
		msg := fmt.Sprintf("%q is not a Linux capability name", name)
		if s := suggestCapability(name); s != "" {
			return msg + fmt.Sprintf("; did you mean %q?", s)
		}
		return msg + `; write it as the kernel does, e.g. "CAP_NET_ADMIN"`
	})
}

// suggestCapability maps "bpf", "cap_bpf" or "CAP_BFP" to "CAP_BPF".
func suggestCapability(name string) string {
	up := strings.ToUpper(name)
	if !strings.HasPrefix(up, "CAP_") {
		up = "CAP_" + up
	}
	if slices.Contains(knownCapabilities, up) {
		return up
	}
	return suggest(up, knownCapabilities)
}
