// Package cniresult turns the stdout of a CNI plugin's ADD, in any spec
// version from 0.1.0 to 1.1.0, into one normalized CNI 1.1.0 result.
//
// The conversion between versions is the CNI library's own (types/create and
// Result.GetAsVersion), so kurma never disagrees with upstream on how an old
// result maps onto the current shape.
package cniresult

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
)

// Version is the CNI spec version every parsed result is normalized to.
const Version = "1.1.0"

// MaxSize caps the plugin output Parse accepts: a real result is a few KiB;
// anything larger is a broken or hostile plugin.
const MaxSize = 1 << 20

// ErrInvalid is wrapped by every error Parse returns for output that is not
// a usable CNI result (empty, not JSON, too large, unknown version, bad
// fields). A CNI error object is reported as *types.Error instead.
var ErrInvalid = errors.New("invalid CNI result")

// Parse decodes a plugin's ADD output. declared is the cniVersion of the
// config the plugin was given ("" when it named none). Output without
// "cniVersion" is read as the declared version, unless it has the
// 0.1.0/0.2.0 shape (top-level "ip4" or "ip6") or nothing was declared:
// then it is read as 0.1.0/0.2.0, the versions whose results may omit it.
// When the plugin printed a CNI error object ({"code": N, "msg": ...}) the
// returned error wraps a *types.Error carrying the plugin's code, message
// and details (errors.As).
func Parse(out []byte, declared string) (*current.Result, error) {
	if len(out) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrInvalid, len(out), MaxSize)
	}
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: empty output", ErrInvalid)
	}
	if !json.Valid(trimmed) {
		return nil, fmt.Errorf("%w: not JSON: %q", ErrInvalid, excerpt(trimmed))
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object: %q", ErrInvalid, excerpt(trimmed))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %q", ErrInvalid, excerpt(trimmed))
	}
	var probe struct {
		CNIVersion *string
		Code       *uint
		Msg        string
		Details    string
	}
	for key, dst := range map[string]any{"cniVersion": &probe.CNIVersion, "code": &probe.Code, "msg": &probe.Msg, "details": &probe.Details} {
		raw, ok := fields[key]
		if !ok || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			want := "a string"
			if key == "code" {
				want = "a non-negative integer"
			}
			return nil, fmt.Errorf("%w: %q must be %s, not %s", ErrInvalid, key, want, excerpt(raw))
		}
	}
	if probe.Code != nil && *probe.Code != 0 {
		return nil, fmt.Errorf("plugin returned CNI error %d: %w", *probe.Code,
			&types.Error{Code: *probe.Code, Msg: probe.Msg, Details: probe.Details})
	}
	version := resultVersion(probe.CNIVersion, declared, fields)
	if (probe.CNIVersion == nil || *probe.CNIVersion == "") && version != "0.1.0" {
		// The CNI library reads a result only as the version it says it
		// is (0.1.0/0.2.0 results may say none).
		fields["cniVersion"], _ = json.Marshal(version)
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		trimmed = b
	}
	res, err := create.Create(version, trimmed)
	if err != nil {
		return nil, fmt.Errorf("%w: version %q: %v", ErrInvalid, version, err)
	}
	conv, err := res.GetAsVersion(Version)
	if err != nil {
		return nil, fmt.Errorf("%w: converting version %q to %s: %v", ErrInvalid, version, Version, err)
	}
	r, ok := conv.(*current.Result)
	if !ok {
		return nil, fmt.Errorf("%w: conversion to %s gave %T", ErrInvalid, Version, conv)
	}
	if err := validate(r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return r, nil
}

// resultVersion is the version to read a result as: its own cniVersion,
// else the declared one, else (or for the old shape) 0.1.0, which reads
// 0.2.0 results too.
func resultVersion(own *string, declared string, fields map[string]json.RawMessage) string {
	if own != nil && *own != "" {
		return *own
	}
	_, ip4 := fields["ip4"]
	_, ip6 := fields["ip6"]
	if declared == "" || ip4 || ip6 {
		return "0.1.0"
	}
	return declared
}

// validate rejects results whose references cannot be followed: an IP
// naming an interface index that does not exist, or an IP without address.
func validate(r *current.Result) error {
	for i, ip := range r.IPs {
		if ip == nil {
			return fmt.Errorf("ips[%d] is null", i)
		}
		if ip.Address.IP == nil {
			return fmt.Errorf("ips[%d] has no address", i)
		}
		if ip.Interface != nil && (*ip.Interface < 0 || *ip.Interface >= len(r.Interfaces)) {
			return fmt.Errorf("ips[%d].interface %d does not name one of the %d interfaces", i, *ip.Interface, len(r.Interfaces))
		}
	}
	for i, itf := range r.Interfaces {
		if itf == nil {
			return fmt.Errorf("interfaces[%d] is null", i)
		}
	}
	for i, rt := range r.Routes {
		if rt == nil {
			return fmt.Errorf("routes[%d] is null", i)
		}
		if rt.Dst.IP == nil {
			return fmt.Errorf("routes[%d] has no dst", i)
		}
	}
	return nil
}

func excerpt(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
