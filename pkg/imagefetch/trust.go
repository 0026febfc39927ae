package imagefetch

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// Verify says how much of an image's provenance a fetch demands.
type Verify string

const (
	// VerifyRequired: an ACI must carry a detached signature by a trusted
	// key whose prefix covers its name (and so must its dependencies); a
	// docker:// image or OCI layout must be accepted by the signature
	// policy with insecureAcceptAnything counted as reject, that is by a
	// signature requirement.
	VerifyRequired Verify = "required"
	// VerifyIfSigned: an ACI's signature, when it has one, must verify
	// as under VerifyRequired; an unsigned ACI is accepted. docker:// images
	// and OCI layouts are judged by the signature policy as written.
	VerifyIfSigned Verify = "if-signed"
	// VerifyNone: no signature or policy is looked at; digests still are.
	VerifyNone Verify = "none"
)

// How a stored image was verified (Verification.Method).
const (
	MethodSignature = "signature" // an ACI's detached signature by a trusted key
	MethodPolicy    = "policy"    // containers/image's signature policy accepted it
	MethodNone      = "none"      // no signature was checked
)

// Verification is how an image in the store was verified when it was
// fetched.
type Verification struct {
	// Mode is the verify mode the image (and, for an ACI, its
	// dependencies) was fetched under.
	Mode Verify `json:"mode"`
	// Method is MethodSignature, MethodPolicy or MethodNone.
	Method string `json:"method"`
	// Key is the fingerprint (upper-case hex) of the OpenPGP key whose
	// signature verified, for MethodSignature.
	Key string `json:"key,omitempty"`
	// Policy is "sha256:<hex>" of the signature policy file that accepted
	// the image, for MethodPolicy.
	Policy string `json:"policy,omitempty"`
}

// ErrSignature is wrapped when a required signature is missing, does not
// verify, is by a key not trusted for the image's name, or a signature
// policy rejects the image.
var ErrSignature = errors.New("signature check failed")

// ErrImageName is wrapped when an image is not named as the fetch demands,
// or a discovered image's labels (version, os, arch, any other asked for)
// differ from the ones asked for.
var ErrImageName = errors.New("unexpected image name")

// errNoSignature is returned by an ACI source that has no signature to
// offer (no .asc file, a 404).
var errNoSignature = errors.New("no signature")

// FetchOption adjusts one fetch.
type FetchOption func(*request)

// WithVerify sets the fetch's verify mode; "" keeps the Fetcher's default.
func WithVerify(v Verify) FetchOption { return func(r *request) { r.verify = v } }

// WithImageName makes the fetch refuse an image not named name: an ACI's
// manifest name, a docker:// reference's repository. A local OCI layout
// carries no name and is refused.
func WithImageName(name string) FetchOption { return func(r *request) { r.imageName = name } }

// WithPlainHTTPConsent lets an unpinned plain http:// image run with no
// signature check: the network itself says "verify": "none". Without it
// such an image is refused under verify none, and must be signed under
// if-signed: nothing else would check what arrives.
func WithPlainHTTPConsent() FetchOption { return func(r *request) { r.plainHTTP = true } }

// WithProgress gives the fetch a callback receiving bytes downloaded so far
// and the total (-1 when unknown).
func WithProgress(fn func(done, total int64)) FetchOption {
	return func(r *request) { r.progress = fn }
}

// request is what one fetch demands.
type request struct {
	verify    Verify
	imageName string
	progress  func(done, total int64)
	// plainHTTP: WithPlainHTTPConsent.
	plainHTTP bool
	// signatureRequired: an if-signed fetch that must find a signature
	// (an unpinned plain http:// source without consent).
	signatureRequired bool
}

// flightKey tells fetches apart that must not share a result.
func (r request) flightKey(uri string) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%t", uri, r.verify, r.imageName, r.plainHTTP)
}

// forDependency is the request a dependency of an image fetched under r
// is resolved with: the same verify mode, its own name.
func (r request) forDependency() request { return request{verify: r.verify} }

func checkVerify(v Verify) error {
	if !slices.Contains([]Verify{VerifyRequired, VerifyIfSigned, VerifyNone}, v) {
		return fmt.Errorf("verify mode %q: want %q, %q or %q", v, VerifyRequired, VerifyIfSigned, VerifyNone)
	}
	return nil
}

// newRequest applies opts over the Fetcher's defaults.
func (f *Fetcher) newRequest(opts []FetchOption) (request, error) {
	r := request{}
	for _, o := range opts {
		o(&r)
	}
	if r.verify == "" {
		r.verify = f.opts.Verify
	}
	if r.verify == "" {
		f.trustMu.RLock()
		r.verify = VerifyNone
		if len(f.keys) > 0 || f.policy != nil {
			r.verify = VerifyRequired
		}
		f.trustMu.RUnlock()
	}
	return r, checkVerify(r.verify)
}

// strength orders verifications: a stored image whose record is weaker
// than a new fetch's has its record raised (see recordVerification).
func (v *Verification) strength() int {
	switch {
	case v == nil:
		return 0
	case v.Method == MethodSignature, v.Method == MethodPolicy && v.Mode == VerifyRequired:
		return 3
	case v.Method == MethodPolicy:
		return 2
	case v.Mode == VerifyIfSigned || v.Mode == VerifyRequired:
		return 1
	}
	return 0
}

// keysFor returns the trusted keys for name: those with the longest
// prefix of it ("" covers every name).
func (f *Fetcher) keysFor(name string) (prefix string, ring openpgp.EntityList, ok bool) {
	f.trustMu.RLock()
	defer f.trustMu.RUnlock()
	for _, k := range f.keys {
		if !strings.HasPrefix(name, k.prefix) {
			continue
		}
		switch {
		case !ok || len(k.prefix) > len(prefix):
			prefix, ring, ok = k.prefix, append(openpgp.EntityList(nil), k.ring...), true
		case len(k.prefix) == len(prefix):
			ring = append(ring, k.ring...)
		}
	}
	return prefix, ring, ok
}

// allKeys is every trusted key, to check a signature before the name it
// must cover is known.
func (f *Fetcher) allKeys() openpgp.EntityList {
	f.trustMu.RLock()
	defer f.trustMu.RUnlock()
	var all openpgp.EntityList
	for _, k := range f.keys {
		all = append(all, k.ring...)
	}
	return all
}

func fingerprint(e *openpgp.Entity) string {
	return fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
}

// keyTrustedFor reports whether the key with fingerprint fpr is among the
// keys trusted for name.
func (f *Fetcher) keyTrustedFor(fpr, name string) bool {
	_, ring, ok := f.keysFor(name)
	return ok && slices.ContainsFunc(ring, func(e *openpgp.Entity) bool { return fingerprint(e) == fpr })
}

// bindSigner checks that the key that signed an ACI (nil: unsigned or not
// checked) is trusted for the name in its manifest, and returns how the
// image was verified.
func (f *Fetcher) bindSigner(signer *openpgp.Entity, name, uri string, mode Verify) (*Verification, error) {
	if signer == nil {
		why := "verify is none"
		if mode == VerifyIfSigned {
			why = "it is unsigned and verify is if-signed"
		}
		f.log.WithFields(map[string]any{"image": name, "source": uri}).
			Warnf("image %s was not signature-checked (%s)", name, why)
		return &Verification{Mode: mode, Method: MethodNone}, nil
	}
	fpr := fingerprint(signer)
	if !f.keyTrustedFor(fpr, name) {
		if prefix, _, ok := f.keysFor(name); ok {
			return nil, fmt.Errorf("%w: image %s is signed by key %s, which is not trusted for names under %q", ErrSignature, name, fpr, prefix)
		}
		return nil, fmt.Errorf("%w: image %s is signed by key %s, but no trusted key covers the name %q", ErrSignature, name, fpr, name)
	}
	f.log.WithFields(map[string]any{"image": name, "key": fpr}).Info("signature verified")
	return &Verification{Mode: mode, Method: MethodSignature, Key: fpr}, nil
}

// checkStored says why a stored image does not meet r, or nil when it
// does: an ACI's name, and a verification at least as strong as r's mode asks,
// by a key or policy still trusted now. An ACI laid over dependencies
// meets a mode only when it was fetched under that mode or a stronger
// one, since its dependencies were verified under that mode.
func (f *Fetcher) checkStored(r request, img *Image) error {
	if err := checkName(r, img); err != nil {
		return err
	}
	v := img.Verified
	if v == nil {
		v = &Verification{Mode: VerifyNone, Method: MethodNone}
	}
	if r.verify == VerifyNone {
		return nil
	}
	if img.Format == "aci" {
		return f.checkStoredACI(r, img, v)
	}
	return f.checkStoredOCI(r, v)
}

func (f *Fetcher) checkStoredACI(r request, img *Image, v *Verification) error {
	if v.Method == MethodSignature && !f.keyTrustedFor(v.Key, img.Name) {
		return fmt.Errorf("%w: stored image %s was signed by key %s, which is no longer trusted for its name", ErrSignature, img.ID, v.Key)
	}
	// Images stored before kurma recorded verifications (nil) did not
	// record their dependencies either: they count as having some.
	hasDeps := len(img.Dependencies) > 0 || img.Verified == nil
	weakDeps := hasDeps && v.Mode != VerifyRequired && (r.verify == VerifyRequired || v.Mode == VerifyNone)
	switch {
	case weakDeps && img.Verified == nil:
		return fmt.Errorf("%w: stored image %s predates kurma's verification records", ErrSignature, img.ID)
	case weakDeps:
		return fmt.Errorf("%w: stored image %s has dependencies laid under verify %q; remove it (kurmactl image rm) to fetch it again under %q", ErrSignature, img.ID, v.Mode, r.verify)
	case (r.verify == VerifyRequired || r.signatureRequired) && v.Method != MethodSignature:
		return fmt.Errorf("%w: stored image %s is not signed", ErrSignature, img.ID)
	case r.verify == VerifyIfSigned && v.Method == MethodNone && v.Mode == VerifyNone:
		return fmt.Errorf("%w: stored image %s was never checked for a signature", ErrSignature, img.ID)
	}
	return nil
}

func (f *Fetcher) checkStoredOCI(r request, v *Verification) error {
	want := f.policyFor(r.verify)
	if want.err != nil {
		return want.err
	}
	if want.digest == "" {
		return nil // if-signed with no policy: nothing was checked, nothing is asked
	}
	if v.Method != MethodPolicy || v.Policy != want.digest || v.strength() < want.record.strength() {
		return fmt.Errorf("%w: stored image was not accepted by the current signature policy under verify %q", ErrSignature, r.verify)
	}
	return nil
}

// checkName refuses a stored ACI not named as r demands. The names of
// docker:// and OCI images come from their URI and are checked there.
func checkName(r request, img *Image) error {
	if r.imageName != "" && img.Format == "aci" && img.Name != r.imageName {
		return fmt.Errorf("%w: image is named %q, the network expects %q", ErrImageName, img.Name, r.imageName)
	}
	return nil
}
