package api

import "encoding/json"

// The names of the API before kurma's vocabulary (docs/glossary.md), kept
// for clients of the previous release: during a rolling update of the
// DaemonSet the previous kurma-cni, on the host, talks to the new kurmad.
// Requests may still use the old names; answers still carry the old
// fields such a client reads, beside the new ones. All of it is
// deprecated and goes in a later release.

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

// MarshalJSON encodes the pod with, besides "attachments", the deprecated
// "networks": the attachments as the previous release named them.
func (p Pod) MarshalJSON() ([]byte, error) {
	type plain Pod
	legacy := make([]legacyAttachment, len(p.Attachments))
	for i, a := range p.Attachments {
		legacy[i] = legacyAttachment{Name: a.Network, Interface: a.Interface, Image: a.Image, Result: a.Result}
	}
	return json.Marshal(struct {
		plain
		Networks []legacyAttachment `json:"networks"`
	}{plain(p), legacy})
}

// legacyAttachmentCheck is an attachment's check outcome as the previous
// release answered it in a check's "networks".
type legacyAttachmentCheck struct {
	Name      string `json:"name"`
	Interface string `json:"interface"`
	Outcome   string `json:"outcome"`
	Message   string `json:"message,omitempty"`
}

// MarshalJSON encodes the check with, besides "attachments", the
// deprecated "networks": the outcomes as the previous release named them.
func (c PodCheck) MarshalJSON() ([]byte, error) {
	type plain PodCheck
	legacy := make([]legacyAttachmentCheck, len(c.Attachments))
	for i, a := range c.Attachments {
		legacy[i] = legacyAttachmentCheck{Name: a.Network, Interface: a.Interface, Outcome: a.Outcome, Message: a.Message}
	}
	return json.Marshal(struct {
		plain
		Networks []legacyAttachmentCheck `json:"networks"`
	}{plain(c), legacy})
}

// MarshalJSON encodes the generation with, besides "network", the
// deprecated "name" (the same network name) the previous release's
// kurma-cni reads for its STATUS.
func (g Generation) MarshalJSON() ([]byte, error) {
	type plain Generation
	return json.Marshal(struct {
		plain
		Name string `json:"name"`
	}{plain(g), g.Network})
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
