package imagefetch

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/containers/image/v5/signature"
)

// signaturePolicy is the containers-policy.json (Options.SignaturePolicy)
// that judges docker:// images and OCI layouts, evaluated by
// containers/image itself.
type signaturePolicy struct {
	asWritten *signature.Policy // for if-signed
	// strict is the same policy with every insecureAcceptAnything turned
	// into reject: what remains can only be met by a signature
	// requirement (signedBy, sigstoreSigned). For required.
	strict *signature.Policy
	digest string // "sha256:<hex>" of the file as read
}

// loadPolicy reads and parses the policy file once.
func loadPolicy(path string) (*signaturePolicy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signature policy: %w", err)
	}
	p, err := parsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("signature policy %s: %w", path, err)
	}
	return p, nil
}

// CheckPolicy says what is wrong with a containers-policy.json kurmad
// would be given as its signature_policy: nil when kurmad takes it.
func CheckPolicy(data []byte) error {
	_, err := parsePolicy(data)
	return err
}

func parsePolicy(data []byte) (*signaturePolicy, error) {
	asWritten, err := signature.NewPolicyFromBytes(data)
	if err != nil {
		return nil, err
	}
	strictData, err := rejectAcceptAnything(data)
	if err != nil {
		return nil, err
	}
	strict, err := signature.NewPolicyFromBytes(strictData)
	if err != nil {
		return nil, err
	}
	return &signaturePolicy{asWritten: asWritten, strict: strict, digest: fmt.Sprintf("sha256:%x", sha256.Sum256(data))}, nil
}

// rejectAcceptAnything rewrites a policy's requirement lists (its default
// and every transport scope) replacing {"type": "insecureAcceptAnything"}
// by {"type": "reject"}. The policy has already been parsed, so its shape
// is known to be valid.
func rejectAcceptAnything(data []byte) ([]byte, error) {
	var p struct {
		Default    []json.RawMessage                       `json:"default"`
		Transports map[string]map[string][]json.RawMessage `json:"transports,omitempty"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	reject := json.RawMessage(`{"type":"reject"}`)
	fix := func(reqs []json.RawMessage) {
		for i, r := range reqs {
			var t struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(r, &t) == nil && t.Type == "insecureAcceptAnything" {
				reqs[i] = reject
			}
		}
	}
	fix(p.Default)
	for _, scopes := range p.Transports {
		for _, reqs := range scopes {
			fix(reqs)
		}
	}
	return json.Marshal(p)
}

// acceptAnything is what verify none runs containers/image's copy with:
// digests are still checked, signatures are not looked at.
var acceptAnything = &signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}}

// policyChoice is the policy a fetch copies with and the record an image
// it accepts gets.
type policyChoice struct {
	policy *signature.Policy
	record Verification
	digest string // of the policy file; "" when none is involved
	err    error  // the mode cannot be met at all
}

// policyFor picks the policy for a docker:// or OCI fetch under mode.
func (f *Fetcher) policyFor(mode Verify) policyChoice {
	f.trustMu.RLock()
	defer f.trustMu.RUnlock()
	switch {
	case mode == VerifyNone:
		return policyChoice{policy: acceptAnything, record: Verification{Mode: mode, Method: MethodNone}}
	case f.policy == nil && mode == VerifyIfSigned:
		return policyChoice{policy: acceptAnything, record: Verification{Mode: mode, Method: MethodNone}}
	case f.policy == nil:
		return policyChoice{err: fmt.Errorf("%w: verify is required, and no signature_policy is configured to judge docker:// and OCI images", ErrSignature)}
	case mode == VerifyIfSigned:
		return policyChoice{policy: f.policy.asWritten, digest: f.policy.digest,
			record: Verification{Mode: mode, Method: MethodPolicy, Policy: f.policy.digest}}
	default:
		return policyChoice{policy: f.policy.strict, digest: f.policy.digest,
			record: Verification{Mode: mode, Method: MethodPolicy, Policy: f.policy.digest}}
	}
}

// policyError marks a containers/image refusal by the signature policy (a
// requirement not met, a signature that does not verify) as ErrSignature;
// other errors pass unchanged.
func policyError(err error) error {
	var pre signature.PolicyRequirementError
	var ise signature.InvalidSignatureError
	if errors.As(err, &pre) || errors.As(err, &ise) {
		return fmt.Errorf("%w: rejected by the signature policy: %w", ErrSignature, err)
	}
	return err
}
