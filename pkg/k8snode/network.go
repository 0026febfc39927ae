package k8snode

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// The Network custom resource (networks.kurma.dev, cluster-scoped): a
// kurma network defined through the API server rather than in the
// ConfigMap's kurmad.json. deploy/kubernetes/kurma.yaml installs its CRD;
// every node's kurma-node watches the objects and turns them into
// networks of its kurmad's config, applied as a reload (NetworkWatcher).
const (
	NetworkGroup    = "kurma.dev"
	NetworkVersion  = "v1alpha1"
	NetworkResource = "networks"
)

// NetworkObject is the part of a Network kurma-node reads.
type NetworkObject struct {
	Metadata struct {
		Name            string       `json:"name"`
		Generation      int64        `json:"generation"`
		ResourceVersion string       `json:"resourceVersion"`
		Finalizers      []string     `json:"finalizers,omitempty"`
		DeletionTime    *metav1.Time `json:"deletionTimestamp,omitempty"`
	} `json:"metadata"`
	Spec   NetworkSpec   `json:"spec"`
	Status NetworkStatus `json:"status"`
}

// Deleting reports whether the object is being deleted: kurmad takes no
// new pod into it, and it stays while a node's finalizer says pods there
// hold it (finalizers.go).
func (o *NetworkObject) Deleting() bool { return o.Metadata.DeletionTime != nil }

// NetworkSpec is a Network's spec: the kurmad network it defines.
type NetworkSpec struct {
	// Image is the plugin image's URI, in any form kurmad takes
	// (docker://, file://, https://, oci-archive://, an appc name).
	Image string `json:"image"`
	// Verify and ImageName are kurmad's verify and image_name.
	Verify    string `json:"verify,omitempty"`
	ImageName string `json:"imageName,omitempty"`
	// ImagePullSecret names a Secret of type kubernetes.io/dockerconfigjson
	// in kurma's namespace holding the registry credentials to pull Image.
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
	// Trust is a key or signature policy kurmad trusts for the image,
	// from a Secret or ConfigMap in kurma's namespace.
	Trust *NetworkTrust `json:"trust,omitempty"`
	// Config is the plugin's config: every key of a kurmad network but
	// those the spec sets (name, image, default, ...).
	Config map[string]json.RawMessage `json:"config,omitempty"`
	// Default and ContainerInterface are kurmad's default and
	// containerInterface.
	Default            bool   `json:"default,omitempty"`
	ContainerInterface string `json:"containerInterface,omitempty"`
	// KubernetesCredentials is kurmad's kubernetes_credentials.
	KubernetesCredentials bool `json:"kubernetesCredentials,omitempty"`
	// NetworkPolicy is kurmad's network_policy: the policy network
	// enforces policy on the network's pods.
	NetworkPolicy bool `json:"networkPolicy,omitempty"`
	// NamespaceSelector selects the namespaces whose pods may join the
	// network; nil: every namespace. A default network admits every pod.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// ClusterNetwork marks the cluster network: every pod's first
	// attachment (the conflist's "network"), which admits every pod.
	ClusterNetwork bool `json:"clusterNetwork,omitempty"`
	// Scope is ScopeNode (the default: the config as written on each
	// node) or ScopeCluster (one network across the nodes: with Subnet,
	// kurma gives each node a block of it and routes between them).
	Scope string `json:"scope,omitempty"`
	// Subnet (ScopeCluster) is the network's addresses, of which each node
	// gets a block of BlockSize bits (default /24, /64 for IPv6):
	// __NODE_BLOCK__ in the config stands for the node's.
	Subnet    string `json:"subnet,omitempty"`
	BlockSize int    `json:"blockSize,omitempty"`
}

// Scopes of a Network.
const (
	// ScopeNode: the network is each node's own; its config is the same
	// on each (but for the node placeholders), and nothing joins them.
	ScopeNode = "node"
	// ScopeCluster: the network spans the nodes, through its plugin (an
	// overlay such as flannel) or, with spec.subnet, through kurma: each
	// node a block of the subnet, routes between the blocks.
	ScopeCluster = "cluster"
)

// NetworkTrust is a Network's spec.trust: what kurmad's trust gains for
// it, from one key of a Secret or a ConfigMap (exactly one) in kurma's
// namespace.
type NetworkTrust struct {
	// Kind is TrustAppcKey or TrustPolicy.
	Kind string `json:"kind"`
	// Prefix (TrustAppcKey) is the ACI names the key may sign: its
	// trusted_keys entry's prefix; "" → spec.imageName.
	Prefix       string    `json:"prefix,omitempty"`
	SecretRef    *TrustRef `json:"secretRef,omitempty"`
	ConfigMapRef *TrustRef `json:"configMapRef,omitempty"`
}

// TrustRef names a key of a Secret or ConfigMap.
type TrustRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Kinds of spec.trust.
const (
	// TrustAppcKey: an armored OpenPGP public key trusted to sign ACIs
	// (an entry of kurmad's trusted_keys).
	TrustAppcKey = "appcKey"
	// TrustPolicy: a containers-policy.json for docker:// and OCI images
	// (kurmad's signature_policy, of which it has one).
	TrustPolicy = "policy"
)

// TrustFile is a Network's spec.trust as written for kurmad: its kind,
// the key's prefix and the file holding it.
type TrustFile struct {
	Kind, Prefix, Path string
}

// NetworkStatus is a Network's status: one entry per node (each node's
// kurma-node writes its own, by server-side apply, only when it changed),
// and how many run it, written by the node whose entry changed last.
type NetworkStatus struct {
	Nodes   []NodeStatus `json:"nodes,omitempty"`
	Running *int         `json:"running,omitempty"`
	Failing *int         `json:"failing,omitempty"`
	// Resolved is spec.image by digest, resolved once by the first node
	// to see it (Resolver): every node runs it.
	Resolved *ResolvedImage `json:"resolved,omitempty"`
	// Pods counts, while the object is being deleted, the pods that
	// still hold it on the nodes (the sum of the entries' Pods).
	Pods *int `json:"pods,omitempty"`
}

// ResolvedImage is a docker:// image by tag (From) resolved to a digest
// (Image).
type ResolvedImage struct {
	From  string `json:"from"`
	Image string `json:"image"`
}

// NodeStatus is a Network on one node.
type NodeStatus struct {
	Node string `json:"node"`
	// State is the state of the generation serving new pods on the node
	// (kurmad's: fetching, starting, running, unavailable, failed), or
	// Invalid or Conflict when the node's kurmad does not take the
	// Network.
	State string `json:"state"`
	// Generation is kurmad's generation serving it; Image its image ID.
	Generation int    `json:"generation,omitempty"`
	Image      string `json:"image,omitempty"`
	// Reason says why it does not run.
	Reason string `json:"reason,omitempty"`
	// ObservedGeneration is the object's metadata.generation this entry
	// is about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Block (spec.scope cluster, with spec.subnet) is the node's block of
	// the subnet, Address the node's address its block is routed to
	// (its InternalIP of the subnet's family). No two nodes hold one
	// block: a node takes a free one by a write bound to the object's
	// resourceVersion (blocks.go); it is free again once the Node goes.
	Block   string `json:"block,omitempty"`
	Address string `json:"address,omitempty"`
	// Pods counts the pods on the node that hold the network, written
	// while the object is being deleted (StateDeleting).
	Pods               *int        `json:"pods,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
}

// States a NodeStatus has beside kurmad's generation states.
const (
	// StateInvalid: kurmad's config check refuses the Network's network.
	StateInvalid = "invalid"
	// StateConflict: a network of that name is defined in the ConfigMap's
	// kurmad.json too (which stays).
	StateConflict = "conflict"
	// StatePending: the Network waits for its image to be resolved, or
	// for the node's block of its subnet.
	StatePending = "pending"
	// StateDeleting: the object is being deleted; the node takes no new
	// pod into it, and Pods says how many still hold it there.
	StateDeleting = "deleting"
)

// specKeys are the kurmad network keys a Network sets through its spec
// (and so refuses in spec.config), by spec field.
var specKeys = map[string]string{
	"name": "metadata.name", "image": "spec.image", "aci": "spec.image", "default": "spec.default",
	"containerInterface": "spec.containerInterface", "verify": "spec.verify", "image_name": "spec.imageName",
	"kubernetes_credentials": "spec.kubernetesCredentials", "network_policy": "spec.networkPolicy",
}

// Entry is the Network as an entry of kurmad's pod_networks, with image
// its image (the spec's, or the digest it was resolved to).
func (o *NetworkObject) Entry(image string) (json.RawMessage, error) {
	out := make(map[string]any, len(o.Spec.Config)+6)
	for k, v := range o.Spec.Config {
		if f, ok := specKeys[k]; ok {
			return nil, fmt.Errorf("spec.config.%s: set by %s, not in the plugin's config", k, f)
		}
		out[k] = v
	}
	out["name"] = o.Metadata.Name
	out["image"] = image
	if o.Spec.Default {
		out["default"] = true
	}
	if o.Spec.ContainerInterface != "" {
		out["containerInterface"] = o.Spec.ContainerInterface
	}
	if o.Spec.Verify != "" {
		out["verify"] = o.Spec.Verify
	} else if o.Spec.Trust != nil {
		out["verify"] = "required" // what the trust is for
	}
	if o.Spec.ImageName != "" {
		out["image_name"] = o.Spec.ImageName
	}
	if o.Spec.KubernetesCredentials {
		out["kubernetes_credentials"] = true
	}
	if o.Spec.NetworkPolicy {
		out["network_policy"] = true
	}
	return json.Marshal(out)
}

// Merged is kurmad's config from the ConfigMap's template and the
// Network objects: the config to write, and why each object left out of
// it was (StateInvalid, StateConflict).
type Merged struct {
	Config  []byte
	Refused map[string]NodeStatus
}

// Merge adds the networks of objs to base (the rendered template): each,
// by name, is checked as kurmad checks its config, beside base's networks
// and the objects taken before it, so that one object kurmad would refuse
// never holds back the others, and the config written is the last one
// checked. A
// name base defines too is a conflict: base's stays. images gives each
// object's image (its resolved digest); an object without one waits
// (StatePending). trust gives each object's spec.trust as a file: a key
// joins trusted_keys, a policy becomes signature_policy (kurmad has one:
// a second is refused). The trust is kurmad's, for every network: so
// that a Network's trust never changes how the others are verified,
// base's default verify mode is written out when base names none.
func Merge(base []byte, objs []*NetworkObject, images map[string]string, trust map[string]TrustFile, baseDir string) (*Merged, error) {
	return MergeNetworks(MergeInput{Base: base, Objects: objs, Images: images, Trust: trust, BaseDir: baseDir})
}

// MergeInput is what MergeNetworks merges (see Merge).
type MergeInput struct {
	Base    []byte
	Objects []*NetworkObject
	Images  map[string]string
	Trust   map[string]TrustFile
	BaseDir string
	// Render, when set, is each object's entry as this node's kurmad
	// gets it (its placeholders replaced); an error wrapping ErrNoBlock
	// leaves the object out, pending, any other as invalid.
	Render func(o *NetworkObject, entry []byte) ([]byte, error)
	// Refuse names, by object, why it is left out though kurmad would
	// take it (its state and reason), checked before anything else.
	Refuse func(o *NetworkObject) *NodeStatus
}

// MergeNetworks is Merge with each object's entry rendered for the node.
func MergeNetworks(in MergeInput) (*Merged, error) {
	base, objs, images, trust, baseDir := in.Base, in.Objects, in.Images, in.Trust, in.BaseDir
	var top map[string]json.RawMessage
	if err := json.Unmarshal(base, &top); err != nil {
		return nil, fmt.Errorf("kurmad's config template: %w", err)
	}
	key := "pod_networks"
	if _, ok := top[key]; !ok {
		if _, ok := top["podNetworks"]; ok {
			key = "podNetworks"
		}
	}
	var nets []json.RawMessage
	if raw, ok := top[key]; ok {
		if err := json.Unmarshal(raw, &nets); err != nil {
			return nil, fmt.Errorf("kurmad's config template: %s: %w", key, err)
		}
	}
	var keys []json.RawMessage
	if raw, ok := top["trusted_keys"]; ok {
		if err := json.Unmarshal(raw, &keys); err != nil {
			return nil, fmt.Errorf("kurmad's config template: trusted_keys: %w", err)
		}
	}
	_, basePolicy := top["signature_policy"]
	if _, ok := top["verify"]; !ok {
		v := "none"
		if len(keys) > 0 || basePolicy {
			v = "required"
		}
		top["verify"] = json.RawMessage(strconv.Quote(v))
	}
	var names []string
	for _, n := range nets {
		var e struct{ Name string }
		_ = json.Unmarshal(n, &e)
		names = append(names, e.Name)
	}
	sorted := slices.Clone(objs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Metadata.Name < sorted[j].Metadata.Name })
	m := &Merged{Refused: map[string]NodeStatus{}}
	// render is the config with base's networks and extra, base's keys
	// and extraKeys, and policy (when base sets none).
	render := func(extra, extraKeys []json.RawMessage, policy string) ([]byte, error) {
		c := make(map[string]json.RawMessage, len(top))
		for k, v := range top {
			c[k] = v
		}
		all, err := json.Marshal(append(slices.Clone(nets), extra...))
		if err != nil {
			return nil, err
		}
		c[key] = all
		if len(extraKeys) > 0 {
			if c["trusted_keys"], err = json.Marshal(append(slices.Clone(keys), extraKeys...)); err != nil {
				return nil, err
			}
		}
		if policy != "" {
			c["signature_policy"] = json.RawMessage(strconv.Quote(policy))
		}
		return json.MarshalIndent(c, "", "  ")
	}
	var accepted, acceptedKeys []json.RawMessage
	policy, policyFrom := "", ""
	taken := map[string]bool{}
	for _, o := range sorted {
		name := o.Metadata.Name
		if in.Refuse != nil {
			if st := in.Refuse(o); st != nil {
				m.Refused[name] = *st
				continue
			}
		}
		if taken[name] {
			m.Refused[name] = NodeStatus{State: StateConflict, Reason: fmt.Sprintf("network %q is defined twice: by two objects; the first runs", name)}
			continue
		}
		if slices.Contains(names, name) {
			m.Refused[name] = NodeStatus{State: StateConflict, Reason: fmt.Sprintf(
				"network %q is defined twice: in kurma's ConfigMap (kurmad.json) and by this Network; the ConfigMap's runs: rename or remove one", name)}
			continue
		}
		image, ok := images[name]
		if !ok {
			m.Refused[name] = NodeStatus{State: StatePending, Reason: "waiting for the image reference to be resolved to a digest"}
			continue
		}
		tf, trusted := trust[name]
		myKeys, myPolicy := acceptedKeys, policy
		if trusted && tf.Kind == TrustPolicy {
			if basePolicy || policy != "" {
				from := "kurma's ConfigMap (kurmad.json)"
				if !basePolicy {
					from = fmt.Sprintf("Network %q", policyFrom)
				}
				m.Refused[name] = NodeStatus{State: StateConflict, Reason: fmt.Sprintf(
					"spec.trust: kurmad takes one signature_policy, and %s sets it: use that policy, or trust a key", from)}
				continue
			}
			myPolicy = tf.Path
		}
		var myKey json.RawMessage
		if trusted && tf.Kind == TrustAppcKey {
			myKey, _ = json.Marshal(map[string]string{"prefix": tf.Prefix, "key": tf.Path})
			myKeys = append(slices.Clone(acceptedKeys), myKey)
		}
		entry, err := o.Entry(image)
		if err == nil && in.Render != nil {
			entry, err = in.Render(o, entry)
			if errors.Is(err, ErrNoBlock) {
				m.Refused[name] = NodeStatus{State: StatePending, Reason: err.Error()}
				continue
			}
		}
		if err == nil {
			var cfg []byte
			if cfg, err = render(append(slices.Clone(accepted), entry), myKeys, myPolicy); err == nil {
				_, err = netconfig.Parse(cfg, baseDir)
			}
		}
		if err != nil {
			m.Refused[name] = NodeStatus{State: StateInvalid, Reason: checkMessage(err, name)}
			continue
		}
		accepted = append(accepted, entry)
		taken[name] = true
		acceptedKeys = myKeys
		if myPolicy != policy {
			policy, policyFrom = myPolicy, name
		}
	}
	cfg, err := render(accepted, acceptedKeys, policy)
	if err != nil {
		return nil, err
	}
	m.Config = cfg
	return m, nil
}

// checkMessage is kurmad's config check's complaint about network name,
// one line: the problems that name it (all of them when none does).
func checkMessage(err error, name string) string {
	var ve *netconfig.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	var mine []string
	for _, l := range lines {
		if strings.Contains(l, fmt.Sprintf("%q", name)) {
			mine = append(mine, strings.TrimSpace(l))
		}
	}
	if len(mine) == 0 {
		return strings.Join(lines, "; ")
	}
	return strings.Join(mine, "; ")
}

// Admits says whether the Network admits a pod of a namespace with
// nsLabels, and if not, the rule that refuses it: a default network, the
// cluster network, or one without a namespaceSelector, admits every pod.
func (o *NetworkObject) Admits(nsLabels map[string]string) (bool, string, error) {
	if o.Spec.Default || o.Spec.ClusterNetwork || o.Spec.NamespaceSelector == nil {
		return true, "", nil
	}
	sel, err := metav1.LabelSelectorAsSelector(o.Spec.NamespaceSelector)
	if err != nil {
		return false, "", fmt.Errorf("network %q: spec.namespaceSelector: %w", o.Metadata.Name, err)
	}
	if sel.Matches(labels.Set(nsLabels)) {
		return true, "", nil
	}
	return false, "spec.namespaceSelector " + metav1.FormatLabelSelector(o.Spec.NamespaceSelector), nil
}

// MergeAuths merges the .dockerconfigjson of pull secrets (by name) into
// one auth file of containers/image's format ({"auths": {...}}), where a
// key is a registry or, more specific and looked up first, a repository
// on it. repos are, by Secret, the repositories (RepositoryOf) of the
// images of the Networks naming it. Secrets that agree on a registry
// share its entry; a Secret whose credentials for a registry differ from
// those of a Secret before it (by name) gets them scoped to each of its
// repositories there, so that two Networks pulling from one registry with
// different Secrets both work. Only two Secrets with different
// credentials for one repository conflict: the later is left out, with
// the reason, in refused.
func MergeAuths(secrets map[string][]byte, repos map[string][]string) (auth []byte, refused map[string]error) {
	names := make([]string, 0, len(secrets))
	for n := range secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	auths := map[string]json.RawMessage{}
	from := map[string]string{}  // which Secret each key came from
	users := map[string]string{} // the first Secret pulling each repository
	refused = map[string]error{}
next:
	for _, n := range names {
		var cfg struct {
			Auths map[string]json.RawMessage `json:"auths"`
		}
		if err := json.Unmarshal(secrets[n], &cfg); err != nil {
			refused[n] = fmt.Errorf("Secret %s: .dockerconfigjson: %w", n, err)
			continue
		}
		add := map[string]json.RawMessage{}
		for _, reg := range slices.Sorted(maps.Keys(cfg.Auths)) {
			a := cfg.Auths[reg]
			_, held := from[reg]
			if !held {
				add[reg] = a
			}
			agrees := !held || string(auths[reg]) == string(a)
			for _, repo := range repos[n] {
				if !sameRegistry(repo, reg) {
					continue
				}
				prev, conflict := "", false
				if cur, ok := auths[repo]; ok {
					prev, conflict = from[repo], string(cur) != string(a)
				} else if !agrees {
					if u := users[repo]; u != "" && u != n {
						// Another Secret's Network pulls this repository
						// with the registry's credentials.
						prev, conflict = u, true
					} else {
						// Another Secret holds the registry: these
						// credentials are scoped to the repository.
						add[repo] = a
					}
				}
				if conflict {
					refused[n] = fmt.Errorf("Secrets %s and %s hold different credentials for repository %s", prev, n, repo)
					continue next
				}
			}
		}
		for k, a := range add {
			auths[k], from[k] = a, n
		}
		for _, repo := range repos[n] {
			if users[repo] == "" {
				users[repo] = n
			}
		}
	}
	auth, _ = json.Marshal(map[string]any{"auths": auths})
	return auth, refused
}

// RepositoryOf is the repository a docker:// image is pulled from, as
// an auth file's key names it (registry/path: docker.io/library/nginx);
// "" for an image of another kind or unreadable.
func RepositoryOf(image string) string {
	rest, ok := strings.CutPrefix(image, "docker://")
	if !ok {
		return ""
	}
	named, err := reference.ParseNormalizedNamed(rest)
	if err != nil {
		return ""
	}
	return named.Name()
}

// sameRegistry: repository repo is on the registry an auth file's key
// reg names (a host[:port], with or without a scheme and path, as
// Docker writes https://index.docker.io/v1/).
func sameRegistry(repo, reg string) bool {
	if i := strings.Index(reg, "://"); i >= 0 {
		reg = reg[i+3:]
	}
	reg, _, _ = strings.Cut(reg, "/")
	if reg == "index.docker.io" || reg == "registry-1.docker.io" {
		reg = "docker.io"
	}
	host, _, _ := strings.Cut(repo, "/")
	return host == reg
}

// Counts are how many of nodes run the network and how many failed it
// or refused it: status.running and status.failing.
func Counts(nodes []NodeStatus) (running, failing int) {
	for _, n := range nodes {
		switch n.State {
		case api.StateRunning:
			running++
		case api.StateFailed, api.StateUnavailable, StateInvalid, StateConflict:
			failing++
		}
	}
	return running, failing
}

// PodCount is the sum of the entries' pods (status.pods while deleting),
// nil when no entry counts them.
func PodCount(nodes []NodeStatus) *int {
	var sum *int
	for _, n := range nodes {
		if n.Pods != nil {
			if sum == nil {
				sum = new(int)
			}
			*sum += *n.Pods
		}
	}
	return sum
}

// LastWriter is the node whose entry of nodes changed last (ties: the
// first name): the one node that writes what the entries sum up (the
// counts, the pruning of deleted nodes), so that one write, not one per
// node, follows a change. "" for no entries.
func LastWriter(nodes []NodeStatus) string {
	var last *NodeStatus
	for i, n := range nodes {
		if last == nil || n.LastTransitionTime.After(last.LastTransitionTime.Time) ||
			(n.LastTransitionTime.Equal(&last.LastTransitionTime) && n.Node < last.Node) {
			last = &nodes[i]
		}
	}
	if last == nil {
		return ""
	}
	return last.Node
}

// Prune is st without the entries of nodes gone reports deleted, with
// the counts of those left; gone lists the entries it dropped (none: st
// needs no write).
func Prune(st NetworkStatus, deleted func(node string) bool) (pruned NetworkStatus, gone []string) {
	pruned = st
	pruned.Nodes = nil
	for _, n := range st.Nodes {
		if deleted(n.Node) {
			gone = append(gone, n.Node)
		} else {
			pruned.Nodes = append(pruned.Nodes, n)
		}
	}
	if len(gone) == 0 {
		return st, nil
	}
	r, f := Counts(pruned.Nodes)
	pruned.Running, pruned.Failing = &r, &f
	return pruned, gone
}

// configNames are the names of the networks of kurmad's config cfg (none
// when it cannot be read).
func configNames(cfg []byte) []string {
	var c struct {
		Nets  []struct{ Name string } `json:"pod_networks"`
		Alias []struct{ Name string } `json:"podNetworks"`
	}
	_ = json.Unmarshal(cfg, &c)
	var out []string
	for _, n := range append(c.Nets, c.Alias...) {
		out = append(out, n.Name)
	}
	return out
}
