package api

import (
	"encoding/json"
	"time"
)

// Info describes the running daemon (GET /v1/info).
type Info struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	StateDir string `json:"state_dir"`
	RunDir   string `json:"run_dir"`
	Socket   string `json:"socket"`
	// Config is the config file kurmad runs on (and reads again on a
	// reload); absent for a kurmad given none.
	Config   string `json:"config,omitempty"`
	Networks int    `json:"networks"` // networks in the config
	Pods     int    `json:"pods"`     // pods in the journal
	// Teardowns counts the pods whose teardown has not finished and is
	// tried again in the background: a del waits for its plugin container
	// to run, or failed.
	Teardowns int `json:"teardowns"`
	// GCWaiting names the networks whose gc waits for a plugin container
	// of the network to run (after the boot's reconcile, a periodic gc or
	// a removal by force).
	GCWaiting []string `json:"gc_waiting,omitempty"`
	// Uptime is a Go duration string rounded to the second ("1h2m3s").
	Uptime string `json:"uptime,omitempty"`
}

// Pod is a network namespace kurmad made (or a runtime's it attached) and
// its attachments. An answer about one pod also carries the attachments
// under their deprecated name "networks" (see Answer).
type Pod struct {
	ID    string `json:"id"` // UUID
	Name  string `json:"name"`
	Netns string `json:"netns"` // <run_dir>/netns/<id>
	// State is where the pod is in its life: creating (its networks are
	// being attached; a delete waits for the create to end), ready,
	// deleting, or failed (a delete could not tear everything down; see
	// Error). Absent in answers of a kurmad that did not say.
	State string `json:"state,omitempty"`
	// Attachments are the networks attached to the pod, in attach order.
	Attachments []Attachment `json:"attachments"`
	Created     time.Time    `json:"created"` // RFC 3339
	// Error is set when a delete could not tear everything down; the pod is
	// kept so that a later delete retries.
	Error string `json:"error,omitempty"`
	// Check is the outcome of the pod's last check (GET
	// /v1/pods/{id}/check, or the periodic check); absent until the pod
	// is checked.
	Check *PodCheck `json:"check,omitempty"`
	// Runtime is set for a pod made in a container runtime's netns (a
	// kurma-cni ADD); Netns is then kurmad's bind mount of the runtime's.
	Runtime *Runtime `json:"runtime,omitempty"`
}

// Pod states as reported in Pod.State.
const (
	PodCreating = "creating"
	PodReady    = "ready"
	PodDeleting = "deleting"
	PodFailed   = "failed"
)

// Runtime is the container runtime's side of a pod it asked for: who
// (Owner, e.g. "podman"), the attachment's CNI identity (container ID,
// the interface of the first network, the runtime's CNI network name) and
// the runtime's own netns path, which kurmad bind-mounts and never removes.
type Runtime struct {
	Owner       string `json:"owner,omitempty"`
	ContainerID string `json:"container_id"`
	// Interface is the runtime's CNI_IFNAME; a request may still name it
	// "ifname", its deprecated name.
	Interface string `json:"interface" deprecated:"ifname"`
	Network   string `json:"network,omitempty"`
	Netns     string `json:"netns"`
	// Dropped is set, in answers only, while kurmad releases a pod whose
	// runtime dropped the container without a DEL that reached kurmad
	// (Netns names no namespace any more, or another one, or the host
	// rebooted): it says which, and DroppedAt when kurmad found it. A
	// create that sets them is refused (bad_request).
	Dropped   string    `json:"dropped,omitempty"`
	DroppedAt time.Time `json:"dropped_at,omitzero"`
}

// RuntimeRef selects the pods of a runtime's attachment: a container ID,
// and the interface and CNI network when not empty (query parameters
// container_id, interface and network of GET and DELETE /v1/pods; ifname,
// the deprecated name of interface, is still accepted).
type RuntimeRef struct {
	ContainerID string
	Interface   string
	Network     string
}

// GCRequest is the body of POST /v1/pods/gc: CNI GC for the runtime's CNI
// network Network. kurmad deletes every pod of that network made for Owner
// (the runtime asking, as in its pods' Runtime.Owner) whose attachment is not in
// ValidAttachments (CNI's cni.dev/valid-attachments). ValidAttachments is
// required: an empty list releases all of Owner's pods on Network, while
// a GC that lists nothing is refused rather than taken for that.
type GCRequest struct {
	Network          string            `json:"network"`
	Owner            string            `json:"owner,omitempty"`
	ValidAttachments []ValidAttachment `json:"valid_attachments"`
}

// ValidAttachment is one attachment a runtime still uses; a request may
// still name Interface "ifname", its deprecated name.
type ValidAttachment struct {
	ContainerID string `json:"container_id"`
	Interface   string `json:"interface" deprecated:"ifname"`
}

// Deleted is the answer of DELETE /v1/pods?container_id=… and POST
// /v1/pods/gc: the IDs of the pods removed (empty when none matched).
type Deleted struct {
	Deleted []string `json:"deleted"`
}

// PodCheck is the outcome of a pod's check: each attachment's
// /opt/network/check. In an answer about one pod it also carries
// Attachments under their deprecated name "networks" (see Answer).
type PodCheck struct {
	Time time.Time `json:"time"`
	// Degraded is set while a network's plugin says the pod's attachment
	// is not as its add left it.
	Degraded    bool              `json:"degraded"`
	Attachments []AttachmentCheck `json:"attachments"`
}

// Check outcomes of one attachment (AttachmentCheck.Outcome).
const (
	CheckPassed  = "passed"  // the plugin's check succeeded
	CheckFailed  = "failed"  // the plugin answered with an error: the pod is degraded
	CheckUnknown = "unknown" // no verdict: its generation is not running, the call timed out, no error object
	CheckSkipped = "skipped" // not asked: the image has no check, or the config's CNI version has none
)

// AttachmentCheck is one attachment's check outcome.
type AttachmentCheck struct {
	Network   string `json:"network"`
	Interface string `json:"interface"`
	Outcome   string `json:"outcome"`
	Message   string `json:"message,omitempty"`
}

// PluginCall is one plugin call kurmad made for a pod (GET
// /v1/pods/{id}/calls), as kept in memory: the last 16 per pod, lost when
// kurmad restarts.
type PluginCall struct {
	Network string `json:"network"`
	// Generation is the generation of the network's plugin container the
	// call went to (the add's; the del and check of an attachment go where
	// its add went).
	Generation int      `json:"generation"`
	Path       string   `json:"path"`
	Args       []string `json:"args"`
	// Stdin is the config the plugin got, byte for byte, but for the values
	// of the keys in redact_keys, which read "[redacted]"; at most 64 KiB.
	Stdin          string `json:"stdin"`
	StdinTruncated bool   `json:"stdin_truncated,omitempty"`
	// Stdout is what the plugin wrote there, at most 64 KiB.
	Stdout          string `json:"stdout"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	// Stderr is the last 4 KiB of the plugin's stderr.
	Stderr          string `json:"stderr"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	// Error is kurmad's view of a call that did not succeed.
	Error      string    `json:"error,omitempty"`
	Started    time.Time `json:"started"`
	DurationMS float64   `json:"duration_ms"`
	// Pid is the host PID of the main process of the plugin container
	// that served the call: the PID `kurmactl net ls` showed for it.
	Pid       int  `json:"pid"`
	InProcess bool `json:"in_process,omitempty"`
}

// Attachment is one network attached to a pod.
type Attachment struct {
	Network   string `json:"network"`
	Interface string `json:"interface"`
	Image     string `json:"image"` // image ID of the network's plugin
	// Result is the plugin's result normalized to CNI 1.1.0.
	Result json.RawMessage `json:"result"`
	// RawResult is the stdout of the network's add exactly as the plugin
	// wrote it (a JSON string holding the text), up to 64 KiB;
	// RawResultTruncated says that more was cut. Absent for attachments
	// made by a kurmad that did not keep it.
	RawResult          string `json:"raw_result,omitempty"`
	RawResultTruncated bool   `json:"raw_result_truncated,omitempty"`
}

// Generation states as reported in Generation.State.
const (
	StateFetching = "fetching" // its image is being fetched
	StateStarting = "starting"
	StateRunning  = "running"
	StateRetiring = "retiring" // running only for the dels of the pods it served
	// StateUnavailable: the plugin container runs, but its plugin's status
	// says it cannot serve adds (Reason has its message).
	StateUnavailable = "unavailable"
	StateFailed      = "failed"
	StateStopped     = "stopped"
)

// Roles of a network, as Generation.Role has them.
const (
	RoleAttach = "attach" // pods attach to it
	RolePolicy = "policy" // its image enforces policy on the networks that opt in; pods never attach to it
)

// Generation is the state of one generation of a network's plugin container
// in the plugin host (GET /v1/networks lists them). A network has one
// generation, and more while a newer one replaces an older one, which
// retires. Answers also carry Network under its deprecated name "name"
// (see Answer).
type Generation struct {
	Network    string `json:"network"`
	Generation int    `json:"generation"`
	State      string `json:"state"` // fetching|starting|running|unavailable|retiring|failed|stopped
	Image      string `json:"image"` // image ID
	Restarts   int    `json:"restarts"`
	Pid        int    `json:"pid"`
	Reason     string `json:"reason"`
	Default    bool   `json:"default,omitempty"`
	// Pods counts the pods attached through the generation: what keeps a
	// retiring one running (a gc a removal by force owes counts as one).
	Pods int `json:"pods"`
	// Role is the network's role: "attach" (pods attach to it) or
	// "policy" (its image enforces policy on the networks that opt in;
	// pods never attach to it).
	Role string `json:"role"`
	// NetworkPolicy: the network opted in to the policy network's
	// enforcement ("network_policy"); PolicyNetworks, for the policy
	// network, are the networks this generation's config says it polices.
	// Both only on the generation serving the network and one on its way
	// to.
	NetworkPolicy  bool      `json:"network_policy,omitempty"`
	PolicyNetworks []string  `json:"policy_networks,omitempty"`
	Since          time.Time `json:"since,omitzero"`
	// NextRetry is when a failed generation is tried again: its image
	// fetched, or its container restarted.
	NextRetry time.Time `json:"next_retry,omitzero"`
	// FetchedBytes of FetchTotalBytes (0 when unknown) of its image have
	// arrived since FetchStarted, the start of this try, while it is
	// fetching (from http(s):// and docker://; a file:// image shows
	// none).
	FetchedBytes    int64     `json:"fetched_bytes,omitempty"`
	FetchTotalBytes int64     `json:"fetch_total_bytes,omitempty"`
	FetchStarted    time.Time `json:"fetch_started,omitzero"`
	// Trespass is the last time a call of this generation ran while
	// another pod's network namespace changed, and what changed: the call
	// failed (docs/security.md, "Other pods").
	Trespass string `json:"trespass,omitempty"`
}

// ReloadResult is what POST /v1/reload changed, by network name.
type ReloadResult struct {
	Config string `json:"config"` // the file read
	// Added networks start (their images are fetched first).
	Added []string `json:"added"`
	// Replaced networks (image or plugin config changed) start a new
	// generation; it serves new pods once it runs, and the old one retires.
	Replaced []string `json:"replaced"`
	// Retired networks (gone from the config) stop once their pods are gone.
	Retired []string `json:"retired"`
	// Updated networks keep their container; only what kurmad reads when it
	// attaches a pod changed (default, containerInterface,
	// network_policy).
	Updated   []string `json:"updated"`
	Unchanged []string `json:"unchanged"`
	// Changes says, for each replaced or updated network, what changed in its entry: its keys ("image", "default"),
	// or paths into them ("ipam.subnet", "plugins[0].bridge"). A change of
	// layout alone (indentation, key order) is none: such a network is
	// unchanged.
	Changes map[string][]string `json:"changes,omitempty"`
	// DryRun: nothing was applied; this is what the reload would do
	// (POST /v1/reload?dry_run=true).
	DryRun bool `json:"dry_run,omitempty"`
}

// PodRemoval is the outcome of DELETE /v1/pods/{id}?force=true.
type PodRemoval struct {
	ID string `json:"id"`
	// Left lists the attachments whose del did not succeed: what their
	// plugins made may still be there.
	Left []Leftover `json:"left"`
}

// Leftover is one attachment a removal by force may have left behind.
type Leftover struct {
	Network   string `json:"network,omitempty"`
	Interface string `json:"interface,omitempty"`
	Error     string `json:"error"`
}

// Image is an image in kurmad's store (GET /v1/images).
type Image struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Version string    `json:"version,omitempty"`
	Format  string    `json:"format,omitempty"` // aci|oci
	Source  string    `json:"source"`
	Size    int64     `json:"size"`
	Fetched time.Time `json:"fetched"`
	// InUse lists the networks whose plugin runs from this image; such an
	// image cannot be removed.
	InUse []string `json:"in_use,omitempty"`
	// Verified says how the image was verified when it was fetched; absent
	// for images stored before kurma recorded it.
	Verified *ImageVerification `json:"verified,omitempty"`
}

// ImageVerification is how an image was verified (see docs/images.md,
// "Trust").
type ImageVerification struct {
	Mode   string `json:"mode"`             // the verify mode it was fetched under: required|if-signed|none
	Method string `json:"method"`           // signature|policy|none
	Key    string `json:"key,omitempty"`    // fingerprint of the OpenPGP key whose signature verified (method signature)
	Policy string `json:"policy,omitempty"` // sha256:<hex> of the signature policy that accepted it (method policy)
}

// CreatePodRequest is the body of POST /v1/pods.
type CreatePodRequest struct {
	Name string `json:"name,omitempty"`
	// Networks are references like "mynet" or "other:IP=10.1.0.9;K=V", in
	// attach order. Empty means every default network, in config order.
	Networks []string `json:"networks"`
	// RuntimeConfig holds per-network capability arguments, CNI's
	// runtimeConfig: network name → capability ("portMappings", "ips",
	// "mac", "bandwidth", ...) → value. Each network's plugin gets those
	// its config declares.
	RuntimeConfig map[string]map[string]json.RawMessage `json:"runtime_config,omitempty"`
	// Interfaces names the interface a network's attachment takes in the
	// pod (network name → interface name), instead of its template or
	// the first free ethN; kurma-cni fills it from a pod's
	// kurma.dev/networks annotation ("interface", or net1, net2, ...).
	Interfaces map[string]string `json:"interfaces,omitempty"`
	// Runtime, when set, attaches the networks in a container runtime's
	// netns (Runtime.Netns) instead of one kurmad makes.
	Runtime *Runtime `json:"runtime,omitempty"`
}

// PullRequest is the body of POST /v1/images.
type PullRequest struct {
	URI string `json:"uri"`
}

// Progress is one progress report of an image pull streamed as NDJSON.
type Progress struct {
	Done  int64 `json:"done"`
	Total int64 `json:"total"` // 0 or less when unknown
}

// pullEvent is one NDJSON line of a streamed pull: exactly one of Progress,
// Image or Error is set.
type pullEvent struct {
	Progress *Progress `json:"progress,omitempty"`
	Image    *Image    `json:"image,omitempty"`
	Error    string    `json:"error,omitempty"`
	Code     string    `json:"code,omitempty"`
}
