// Package kurmacni is kurma-cni, the CNI plugin a container runtime
// (podman, containerd, CRI-O, anything built on libcni) calls to attach a
// container through kurmad's image-shipped plugins: each CNI verb is
// forwarded to kurmad's API on its unix socket, and the answer is printed
// in the cniVersion the runtime called with. It holds no state and makes
// nothing itself: the attachment in the runtime's netns, its journal, DEL's
// idempotence, GC and the networks' readiness are kurmad's (package
// podnet). cmd/kurma-cni is its main.
package kurmacni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/kurma-project/kurma/internal/slip"
	"github.com/kurma-project/kurma/pkg/api"
)

// Type is kurma-cni's CNI plugin type, the "type" of its config.
const Type = "kurma-cni"

// supportedVersions are the CNI versions kurma-cni speaks.
var supportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// SupportedVersions returns the CNI versions kurma-cni speaks, oldest
// first.
func SupportedVersions() []string { return slices.Clone(supportedVersions) }

// NetConf is kurma-cni's config, one entry of a runtime's conflist:
//
//	{"type": "kurma-cni", "network": "mynet" | ["a", "b"],
//	 "socket": "/run/kurma/kurmad.sock", "owner": "podman", "timeout": "100s",
//	 "node_agent": "/run/kurma/kurma-node.sock",
//	 "capabilities": {"portMappings": true, "ips": true, "mac": true, "bandwidth": true}}
//
// plus what the runtime adds: cniVersion, name, runtimeConfig, prevResult,
// cni.dev/valid-attachments.
type NetConf struct {
	types.NetConf
	// RawPrevResult is "prevResult" as sent, read (into PrevResult) only by
	// the verbs that use it (ADD, CHECK; see parsePrevResult): a DEL must
	// not fail on a result it never looks at. It shadows types.NetConf's.
	RawPrevResult json.RawMessage `json:"prevResult,omitempty"`
	// RawValidAttachments is "cni.dev/valid-attachments" as sent (or its
	// first spelling, "cni.dev/attachments", in RawAttachments): GC tells
	// a list that is absent (nothing known: nothing released) from one
	// that is null or empty (nothing valid). It shadows types.NetConf's.
	RawValidAttachments json.RawMessage `json:"cni.dev/valid-attachments,omitempty"`
	RawAttachments      json.RawMessage `json:"cni.dev/attachments,omitempty"`
	// Timeout ("timeout", a Go duration) bounds each call to kurmad:
	// ADD, DEL, CHECK and GC; STATUS takes at most StatusTimeout. ""
	// → DefaultTimeout.
	Timeout string `json:"timeout,omitempty"`
	// Networks are the kurma networks to attach, in order ("network": a
	// name or a list of names).
	Networks Networks `json:"network"`
	// Socket is kurmad's API socket; "" → api.DefaultSocket.
	Socket string `json:"socket,omitempty"`
	// NodeAgent is kurma-node's socket on a Kubernetes node (see
	// nodeagent.go): when set, a Kubernetes pod's access to its networks
	// is asked of it before the ADD, and its attachments told after.
	NodeAgent string `json:"node_agent,omitempty"`
	// Owner names the runtime in kurmad's pod list; "" → the name of the
	// process that called kurma-cni (podman, ctr, containerd, ...).
	Owner string `json:"owner,omitempty"`
	// RuntimeConfig holds the capability arguments the runtime passed for
	// the capabilities this config declares; kurmad hands each kurma
	// network those its own config declares.
	RuntimeConfig map[string]json.RawMessage `json:"runtimeConfig,omitempty"`

	// timeout is Timeout parsed, or DefaultTimeout.
	timeout time.Duration
}

// Networks is "network": one kurma network's name, or a list of them.
type Networks []string

// UnmarshalJSON reads a string or a list of strings.
func (n *Networks) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*n = Networks{s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errNetworkType
	}
	*n = list
	return nil
}

var errNetworkType = errors.New(`"network" must be a kurma network's name or a list of names`)

// parseConf reads and checks kurma-cni's config from stdin. Its error is a
// CNI error: 6 when stdin is not JSON, 7 naming the key that is wrong.
func parseConf(stdin []byte) (*NetConf, *types.Error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, types.NewError(types.ErrDecodingFailure, "kurma-cni: the network config is not valid JSON", err.Error())
		}
		var te *json.UnmarshalTypeError
		if errors.Is(err, errNetworkType) || (errors.As(err, &te) && te.Field == "network") {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, "kurma-cni: "+errNetworkType.Error(), "")
		}
		if errors.As(err, &te) && te.Field != "" {
			// Said in JSON's words: the Go types a field decodes into
			// are no business of whoever wrote the conflist.
			key := te.Field[strings.LastIndex(te.Field, ".")+1:]
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("kurma-cni: %q: a JSON %s where %s goes", key, te.Value, jsonWords(te.Type)), "")
		}
		return nil, types.NewError(types.ErrDecodingFailure, "kurma-cni: cannot read the network config", "")
	}
	if e := checkKeys(stdin); e != nil {
		return nil, e
	}
	if e := checkConf(&c); e != nil {
		return nil, e
	}
	return &c, nil
}

// ownKeys are the keys of kurma-cni's config that are kurma-cni's own
// (not CNI's, not a runtime's).
var ownKeys = []string{"network", "socket", "owner", "timeout", "node_agent"}

// checkKeys refuses a key that misspells one of kurma-cni's own
// ("netwrok", "Socket"): ignored, it would leave kurma-cni on its default.
// Other unknown keys stay allowed: a runtime may add its own.
func checkKeys(stdin []byte) *types.Error {
	var top map[string]json.RawMessage
	if json.Unmarshal(stdin, &top) != nil {
		return nil
	}
	keys := slices.Sorted(maps.Keys(top))
	for _, k := range keys {
		if slices.Contains(ownKeys, k) {
			continue
		}
		for _, own := range ownKeys {
			if misspells(k, own) {
				return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("kurma-cni: unknown key %q; did you mean %q? (kurma-cni's keys are %s)", k, own, strings.Join(ownKeys, ", ")), "")
			}
		}
	}
	return nil
}

// misspells reports whether key is own written with a slip: another case
// or separator ("Node-Agent"), or one edit or swap of two letters away.
func misspells(key, own string) bool {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	if norm(key) == norm(own) {
		return true
	}
	return len(own) >= 5 && slip.Distance(strings.ToLower(key), own) == 1
}

// jsonWords names what a Go type reads, in JSON's words.
func jsonWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonWords(t.Elem())
	}
	return "another value"
}

// parsePrevResult reads "prevResult" into PrevResult (nil when absent),
// for the verbs that use it: a CNI error 6 when it cannot be read as a
// result of the config's version.
func (c *NetConf) parsePrevResult() *types.Error {
	if len(c.RawPrevResult) == 0 || string(c.RawPrevResult) == "null" {
		return nil
	}
	if err := json.Unmarshal(c.RawPrevResult, &c.NetConf.RawPrevResult); err != nil {
		return types.NewError(types.ErrDecodingFailure, "kurma-cni: \"prevResult\" is not a CNI result object", "")
	}
	if err := version.ParsePrevResult(&c.NetConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "kurma-cni: prevResult", err.Error())
	}
	return nil
}

func checkConf(c *NetConf) *types.Error {
	invalid := func(format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig, "kurma-cni: "+fmt.Sprintf(format, args...), "")
	}
	if len(c.Networks) == 0 {
		return invalid(`"network" is required: the kurma network to attach, e.g. "network": "mynet" (or a list, attached in order)`)
	}
	for i, n := range c.Networks {
		// kurma's network names follow CNI's rule.
		if e := utils.ValidateNetworkName(n); e != nil {
			return invalid(`"network"[%d]: %q is not a kurma network's name: %s`, i, n, e.Msg)
		}
		if slices.Contains(c.Networks[:i], n) {
			return invalid(`"network": %q is listed twice`, n)
		}
	}
	if c.Socket != "" && !filepath.IsAbs(c.Socket) {
		return invalid(`"socket": %q must be the absolute path of kurmad's API socket, such as %s`, c.Socket, api.DefaultSocket)
	}
	if c.NodeAgent != "" && !filepath.IsAbs(c.NodeAgent) {
		return invalid(`"node_agent": %q must be the absolute path of kurma-node's socket, such as /run/kurma/kurma-node.sock`, c.NodeAgent)
	}
	c.timeout = DefaultTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return invalid(`"timeout": %q must be a Go duration greater than zero, such as "100s" (the longest kurma-cni waits for kurmad)`, c.Timeout)
		}
		c.timeout = d
	}
	return nil
}

// socket is the API socket the config names, or kurmad's default.
func (c *NetConf) socket() string {
	if c.Socket != "" {
		return c.Socket
	}
	return api.DefaultSocket
}
