// Package gendef is what one generation of a network runs, written once:
// the config entry's image, consent (capabilities, system calls), limits
// and plugin config (Definition). netconfig parses it, pkg/networks hashes
// it (Hash: has the entry changed?) and journals it (state.Generation
// embeds it), and the plugin host runs it (networkpod.Spec embeds it). A
// leaf: it imports nothing of kurma's.
package gendef

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
