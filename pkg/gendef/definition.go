// Package gendef is what one generation of a network runs, written once:
// the config entry's image, consent (capabilities, system calls), limits
// and plugin config (Definition). netconfig parses it, pkg/networks hashes
// it (Hash: has the entry changed?) and journals it (state.Generation
// embeds it), and the plugin host runs it (networkpod.Spec embeds it). A
// leaf: it imports nothing of kurma's.
package gendef

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// Definition is what a config entry asks its generation's container to
// run. Its JSON is the journal record's (state.Generation embeds it):
// those keys never change across releases. What is tagged `json:"-"` is
// the config entry's alone (where its image comes from, its role): a
// generation run again from its journal record needs none of it, and its
// hash keeps it. A field that changes the container must change the hash
// too (Hash; TestEveryFieldHashed).
type Definition struct {
	// Source is where the image comes from (the entry's image, verify and
	// image_name).
	Source `json:"-"`
	// Policy: the entry's role is "policy" (its plugin polices the other
	// networks); pods never attach to it.
	Policy bool `json:"-"`
	// Image is the image the container runs, nil until it is fetched. The
	// journal keeps its ID alone (Image's JSON); the image store the rest.
	Image *Image `json:"image,omitempty"`
	// Config is the plugin config the main executable gets on stdin, as
	// written (netconfig's Network.PluginConfig(nil)).
	Config []byte `json:"config"`
	// AllowCapabilities ("allow_capabilities") are the capabilities beyond
	// the plugin containers' default set that the network consents to
	// grant when its image asks for them.
	AllowCapabilities []string `json:"allow_capabilities,omitempty"`
	// AllowSyscalls ("allow_syscalls") are the system calls the plugin
	// containers' seccomp filter denies that the network consents to let
	// its plugin make.
	AllowSyscalls []string `json:"allow_syscalls,omitempty"`
	// Limits ("limits") bound the container and each of its calls; zero
	// fields take the plugin host's defaults.
	Limits Limits `json:"limits,omitzero"`
	// MainSeesPods ("main_sees_pods") mounts the pods' network namespaces
	// in the container for its main executable; otherwise only a call
	// sees one, the one its arguments name.
	MainSeesPods bool `json:"main_sees_pods,omitempty"`
	// KubernetesCredentials ("kubernetes_credentials") gives the container
	// its network's own Kubernetes credentials (networkpod.Kubernetes);
	// without it a plugin sees none.
	KubernetesCredentials bool `json:"kubernetes_credentials,omitempty"`
}

// Hash identifies d for "has the entry changed?": two config entries with
// the same hash are served by the same generation, and a generation's
// journal record keeps its entry's hash. The plugin config counts by its
// meaning (Canonical: re-indented, it is the same); the image by where it
// comes from (Source), not the image fetched. An error means the plugin
// config is not JSON.
func (d *Definition) Hash() (string, error) {
	canon, err := Canonical(d.Config)
	if err != nil {
		return "", err
	}
	return d.hashWith(canon), nil
}

// WrittenHash is d's hash as releases before Canonical computed it, over
// the plugin config as written: the one their journaled generations
// carry, so that an upgrade restarts no plugin container.
func (d *Definition) WrittenHash() string { return d.hashWith(d.Config) }

// hashedLimits are Limits as the hash encodes them: untagged, so that the
// hash of every journaled generation stays the one it was made with.
type hashedLimits struct {
	Pids, Memory, CallPids, CallMemory, Tmpfs, WritableLayer, StateDir int64
}

// hashed is a definition as Hash encodes it. The encoding is frozen:
// its field names, order and omissions are part of every journaled
// generation's hash (ACI is the image URI, named before "image" was). A
// field is added at the end with omitempty, so that an entry without it
// keeps its hash (TestHashKept, TestEveryFieldHashed).
type hashed struct {
	ACI, Verify, ImageName string
	Capabilities           []string
	Syscalls               []string `json:",omitempty"`
	Config                 []byte
	Limits                 *hashedLimits `json:",omitempty"`
	MainSeesPods           bool          `json:",omitempty"`
	Kubernetes             bool          `json:",omitempty"`
	Role                   string        `json:",omitempty"` // "" for attach: the definitions of before roles stay
}

// hashWith is d's hash with plugin config conf.
func (d *Definition) hashWith(conf []byte) string {
	h := hashed{
		ACI: d.ImageURI, Verify: d.Verify, ImageName: d.ImageName,
		Capabilities: slices.Clone(d.AllowCapabilities), // a clone: [] stays [], as it was hashed
		Syscalls:     slices.Sorted(slices.Values(d.AllowSyscalls)),
		Config:       conf,
		MainSeesPods: d.MainSeesPods,
		Kubernetes:   d.KubernetesCredentials,
	}
	slices.Sort(h.Capabilities)
	if d.Policy {
		h.Role = "policy"
	}
	if d.Limits != (Limits{}) {
		l := hashedLimits(d.Limits)
		h.Limits = &l
	}
	b, _ := json.Marshal(h) // strings, bools, numbers and bytes always encode
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Source is where a config entry's image comes from.
type Source struct {
	// ImageURI is the entry's "image" (or "aci", its former name), a
	// relative file:// already resolved against the config file's dir.
	ImageURI string
	// Verify is the entry's "verify", else the config's; "" when neither
	// says.
	Verify string
	// ImageName is the name the image must carry ("image_name"); "" when
	// any name is accepted.
	ImageName string
}

// Limits bound a network's plugin container and each of its calls (the
// entry's "limits"; docs/security.md, "Bounds"). A field left at zero
// takes the plugin host's default; NoLimit lifts that bound.
type Limits struct {
	// Pids bounds the container's tasks (processes and threads), Memory
	// its memory in bytes (its tmpfs and writable layer are memory too).
	Pids   int64 `json:"pids,omitempty"`
	Memory int64 `json:"memory,omitempty"`
	// CallPids and CallMemory bound each call's, within the container's.
	CallPids   int64 `json:"call_pids,omitempty"`
	CallMemory int64 `json:"call_memory,omitempty"`
	// Tmpfs is the size of each of the container's /tmp and /run.
	Tmpfs int64 `json:"tmpfs,omitempty"`
	// WritableLayer is the size of the container's writable layer (over
	// the image's rootfs).
	WritableLayer int64 `json:"writable_layer,omitempty"`
	// StateDir is the size of the network's state dir (/var/lib/cni), a
	// filesystem of its own; NoLimit keeps it a plain directory of
	// state_dir's filesystem.
	StateDir int64 `json:"state_dir,omitempty"`
}

// NoLimit is a bound lifted: the config says 0.
const NoLimit = -1
