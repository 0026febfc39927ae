package api

import "encoding/json"

// The names of the API before kurma's vocabulary (docs/glossary.md), kept
// for clients of the previous release: during a rolling update of the
// DaemonSet the previous kurma-cni, on the host, talks to the new kurmad.
// Requests may still use the old names; answers still carry the old
// fields such a client reads, beside the new ones. All of it is
// deprecated and goes in a later release.

// Answer returns what the API sends for an answer v: a pod answered alone
// (a create's, GET /v1/pods/{id}, a check's) with its deprecated names
// added (see podAnswer), generations with theirs (see generationAnswer),
// anything else as it is; kurmactl -o json prints the same. Lists of pods
// (GET /v1/pods) carry no deprecated names: the previous kurma-cni reads
// only their IDs, and the results again would cost a list of 1000 pods
// more than its own encoding. The answer types carry no MarshalJSON of
// their own for the same reason: encoding/json re-validates what one
// returns.
func Answer(v any) any {
	switch v := v.(type) {
	case *Pod:
		return newPodAnswer(v)
	case Pod:
		return newPodAnswer(&v)
	case []Generation:
		out := make([]generationAnswer, len(v))
		for i := range v {
			out[i] = generationAnswer{Generation: &v[i], Name: v[i].Network}
		}
		return out
	}
	return v
}

// podAnswer is a pod with, besides "attachments", the deprecated
// "networks": the attachments as the previous release named them; and a
// check with its own deprecated "networks".
type podAnswer struct {
	*Pod
	Networks []legacyAttachment `json:"networks"`
	Check    *checkAnswer       `json:"check,omitempty"` // in place of Pod.Check
}

func newPodAnswer(p *Pod) podAnswer {
	a := podAnswer{Pod: p, Networks: make([]legacyAttachment, len(p.Attachments))}
	for i, at := range p.Attachments {
		a.Networks[i] = legacyAttachment{Name: at.Network, Interface: at.Interface, Image: at.Image, Result: at.Result}
	}
	if c := p.Check; c != nil {
		a.Check = &checkAnswer{PodCheck: c, Networks: make([]legacyAttachmentCheck, len(c.Attachments))}
		for i, ac := range c.Attachments {
			a.Check.Networks[i] = legacyAttachmentCheck{Name: ac.Network, Interface: ac.Interface, Outcome: ac.Outcome, Message: ac.Message}
		}
	}
	return a
}

// legacyAttachment is an attachment as the previous release answered it
// in a pod's "networks": its network under "name". It carries what such a
// client reads (the network, interface, image and result), not the raw
// result.
type legacyAttachment struct {
	Name      string          `json:"name"`
	Interface string          `json:"interface"`
	Image     string          `json:"image"`
	Result    json.RawMessage `json:"result"`
}

// checkAnswer is a pod's check with, besides "attachments", the deprecated
// "networks": the outcomes as the previous release named them.
type checkAnswer struct {
	*PodCheck
	Networks []legacyAttachmentCheck `json:"networks"`
}

// legacyAttachmentCheck is an attachment's check outcome as the previous
// release answered it in a check's "networks".
type legacyAttachmentCheck struct {
	Name      string `json:"name"`
	Interface string `json:"interface"`
	Outcome   string `json:"outcome"`
	Message   string `json:"message,omitempty"`
}

// generationAnswer is a generation with, besides "network", the deprecated
// "name" (the same network name) the previous release's kurma-cni reads
// for its STATUS.
type generationAnswer struct {
	*Generation
	Name string `json:"name"`
}

// UnmarshalJSON reads a runtime, accepting the deprecated "ifname" for
// "interface".
func (r *Runtime) UnmarshalJSON(b []byte) error {
	type plain Runtime
	var v struct {
		plain
		IfName *string `json:"ifname"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	iface, aerr := deprecatedName("interface", v.Interface, "ifname", v.IfName)
	if aerr != nil {
		return aerr
	}
	*r = Runtime(v.plain)
	r.Interface = iface
	return nil
}

// UnmarshalJSON reads a valid attachment, accepting the deprecated
// "ifname" for "interface".
func (a *ValidAttachment) UnmarshalJSON(b []byte) error {
	type plain ValidAttachment
	var v struct {
		plain
		IfName *string `json:"ifname"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	iface, aerr := deprecatedName("interface", v.Interface, "ifname", v.IfName)
	if aerr != nil {
		return aerr
	}
	*a = ValidAttachment(v.plain)
	a.Interface = iface
	return nil
}

// deprecatedName is the value of a field sent under its name (value) or
// its deprecated one (old, nil when absent): either, or both when they
// agree.
func deprecatedName(name, value, oldName string, old *string) (string, *Error) {
	switch {
	case old == nil || *old == "" || *old == value:
		return value, nil
	case value == "":
		return *old, nil
	}
	return "", Errorf(CodeBadRequest, "fields %q and %q (its deprecated name) differ (%q, %q): send %q alone", name, oldName, value, *old, name)
}
