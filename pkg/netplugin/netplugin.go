// Package netplugin is the plugin image contract as both sides of it see
// it: the executables a network's image provides under /opt/network and
// the verbs they are called by, the image labels kurma reads and
// images/builder writes, the errors a plugin call ends in, and the name of
// the generation a call goes to (Target, and Serving for a new attachment).
//
// It is a leaf: it imports nothing of kurma's and nothing that touches the
// kernel, so the lifecycle (pkg/podnet), the plugin host (pkg/networkpod),
// kurma's own wrapper (pkg/cniwrap) and the API's error mapping can all
// share it without linking each other.
package netplugin

import (
	"fmt"
	"path"
	"slices"
	"time"
)

// Dir is where a network's image keeps its plugin executables.
const Dir = "/opt/network"

// The plugin executables inside a network's image (see docs: the plugin
// image contract), named for the call sites; Verbs says what each is.
const (
	AddPath    = Dir + "/add"
	DelPath    = Dir + "/del"
	CheckPath  = Dir + "/check"
	GCPath     = Dir + "/gc"
	StatusPath = Dir + "/status"
)

// MaxConfigSize is the largest plugin config (a network's entry less
// kurma's keys, the stdin of each call) kurma accepts: the config refuses
// a larger one at load, so the exec agent, which reads a call of at most
// agent.MaxRequestSize bytes (the config with its per-pod arguments), never gets one it must refuse.
const MaxConfigSize = 4 << 20

// DefaultTimeout is how long a plugin call may run when the config's
// plugin_timeout does not say: the one place this default is written.
const DefaultTimeout = time.Minute

// TimeoutOrDefault is d, or DefaultTimeout when d is not positive (a
// config or options value left unset).
func TimeoutOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultTimeout
	}
	return d
}

// Verb is one verb of the contract: the last element of its executable's
// path, and what it is called with.
type Verb struct {
	Name string
	// Pod: it acts on one attachment of a pod, and its arguments are
	// <netns path> <pod uuid> [interface]; the others take none.
	Pod bool
	// Optional: an image may lack it; it is asked only of images that
	// have it (add and del are required).
	Optional bool
}

// verbs are the contract's verbs: the one list every side reads (the
// wrapper's dispatch, the image builder, the agent, transcripts, metrics)
// through Verbs, VerbNames and VerbOf.
var verbs = []Verb{
	{Name: "add", Pod: true},
	{Name: "del", Pod: true},
	{Name: "check", Pod: true, Optional: true},
	{Name: "gc", Optional: true},
	{Name: "status", Optional: true},
}

// Path returns the verb's executable: Dir/<name>.
func (v Verb) Path() string { return Path(v.Name) }

// Path returns the executable of the verb named verb: Dir/verb.
func Path(verb string) string { return Dir + "/" + verb }

// Verbs returns the contract's verbs, in order: a copy of the one list.
func Verbs() []Verb { return slices.Clone(verbs) }

// VerbNames are the names of Verbs, in order.
func VerbNames() []string {
	names := make([]string, len(verbs))
	for i, v := range verbs {
		names[i] = v.Name
	}
	return names
}

// VerbOf returns the verb of a contract path ("/opt/network/add" → add);
// false for any other path.
func VerbOf(p string) (Verb, bool) {
	if path.Dir(p) != Dir {
		return Verb{}, false
	}
	i := slices.IndexFunc(verbs, func(v Verb) bool { return v.Name == path.Base(p) })
	if i < 0 {
		return Verb{}, false
	}
	return verbs[i], true
}

// Image metadata kurma reads (and images/builder writes).
const (
	// CapabilitiesLabel is the OCI config label through which an image
	// asks for capabilities beyond the plugin containers' default set
	// ("CAP_X,CAP_Y"); an ACI asks through its
	// os/linux/capabilities-retain-set isolator. A network grants them
	// only when its config allows them (allow_capabilities).
	CapabilitiesLabel = "dev.kurma.capabilities"

	// WrapperAnnotationACI (an ACI annotation) and WrapperLabelOCI (an OCI
	// config label) declare that every /opt/network executable of the
	// image is kurma's cni-wrapper (pkg/cniwrap) speaking the version
	// given as the value: kurma-agent then serves the verbs in-process,
	// without a wrapper process, when it knows that version.
	WrapperAnnotationACI = "kurma.dev/cni-wrapper"
	WrapperLabelOCI      = "dev.kurma.cni-wrapper"
	// WrapperVersion is the version of the wrapper's behaviour (arguments,
	// stdin, stdout/stderr and exit codes of its verbs) pkg/cniwrap
	// implements and images/builder declares. v2 added gc and status, and
	// check's prevResult.
	WrapperVersion = "v2"
)

// Target is one generation of a network's plugin container: where a call
// goes. An attachment journals the Target its add ran in, and its del goes
// there too.
type Target struct {
	Network    string
	Generation int
}

func (t Target) String() string { return fmt.Sprintf("%s generation %d", t.Network, t.Generation) }

// Serving is where a network's new attachments go: the generation serving
// it and the ID of the image that generation runs ("" while it waits for
// its image). An attachment journals both.
type Serving struct {
	Target
	Image string
}
