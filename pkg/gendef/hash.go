package gendef

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

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

// hashWith is d's hash with plugin config conf. The encoding is frozen:
// its field names, order and omissions are part of every journaled
// generation's hash (ACI is the image URI, named before "image" was). A
// new field is added with omitempty, so that an entry without it keeps
// its hash (TestHashKept).
func (d *Definition) hashWith(conf []byte) string {
	h := struct {
		ACI, Verify, ImageName string
		Capabilities           []string
		Syscalls               []string `json:",omitempty"`
		Config                 []byte
		Limits                 *hashedLimits `json:",omitempty"`
		MainSeesPods           bool          `json:",omitempty"`
		Kubernetes             bool          `json:",omitempty"`
		Role                   string        `json:",omitempty"` // "" for attach: the definitions of before roles stay
	}{d.ImageURI, d.Verify, d.ImageName, slices.Clone(d.AllowCapabilities),
		slices.Sorted(slices.Values(d.AllowSyscalls)), conf, nil, d.MainSeesPods, d.KubernetesCredentials, ""}
	slices.Sort(h.Capabilities) // a clone: [] stays [], as it was hashed
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
