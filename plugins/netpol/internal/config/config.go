// Package config is kurma-netpol's configuration: the JSON object kurmad
// gives the main executable on stdin (the network entry's plugin config),
// or the file named by --config when the daemon runs directly on a node.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// DefaultQueue is the nfqueue number packets are sent to when the config
// names none (kube-network-policies' default too).
const DefaultQueue = 100

// DefaultName is the network name of a config without "name" (a daemon
// run by hand).
const DefaultName = "netpol"

// Config is what the daemon enforces, and where.
type Config struct {
	// Name is the network's name: it names the daemon's nftables table and
	// readiness file, and its errors.
	Name string `json:"name"`
	// PolicyNetworks are the networks whose pod addresses NetworkPolicy
	// applies to (kurmad writes them: the networks that opted in).
	PolicyNetworks []string `json:"policy_networks"`
	// ClusterNetwork, when set, is the network whose address Kubernetes
	// reports as the pod's IP (status.podIPs).
	ClusterNetwork string `json:"cluster_network,omitempty"`
	// Queue is the nfqueue number (1–65535; default DefaultQueue).
	Queue int `json:"queue,omitempty"`
	// AdminNetworkPolicy and BaselineAdminNetworkPolicy turn on the
	// policy.networking.k8s.io v1alpha1 APIs (their CRDs must exist).
	AdminNetworkPolicy         bool `json:"admin_network_policy,omitempty"`
	BaselineAdminNetworkPolicy bool `json:"baseline_admin_network_policy,omitempty"`
	// FailOpen lets the packets of selected pods through while no daemon
	// listens on the queue (not started yet, crashed, stopped); without it
	// they are dropped (kube-network-policies' default).
	FailOpen bool `json:"fail_open,omitempty"`
}

// standardKeys are keys of the plugin config that are kurma's or CNI's,
// not kurma-netpol's: accepted and ignored. "role" is the key kurmad may
// mark a policy network with.
var standardKeys = []string{"cniVersion", "type", "role"}

// known are the keys Config reads.
var known = []string{"name", "policy_networks", "cluster_network", "queue",
	"admin_network_policy", "baseline_admin_network_policy", "fail_open"}

// nameRE is kurma's rule for network names (docs/config.md).
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// Parse reads a config from r: a JSON object. Every problem is reported
// at once, one line each, naming the key at fault.
func Parse(r io.Reader) (*Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config: not a JSON object: %w", err)
	}
	var problems []string
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) && !slices.Contains(standardKeys, k) {
			problems = append(problems, fmt.Sprintf("%s: unknown key (known: %s)", k, strings.Join(known, ", ")))
		}
	}
	c := &Config{}
	for _, k := range known {
		v, ok := raw[k]
		if !ok {
			continue
		}
		var dst any
		switch k {
		case "name":
			dst = &c.Name
		case "policy_networks":
			dst = &c.PolicyNetworks
		case "cluster_network":
			dst = &c.ClusterNetwork
		case "queue":
			dst = &c.Queue
		case "admin_network_policy":
			dst = &c.AdminNetworkPolicy
		case "baseline_admin_network_policy":
			dst = &c.BaselineAdminNetworkPolicy
		case "fail_open":
			dst = &c.FailOpen
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		if err := dec.Decode(dst); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s", k, typeProblem(err)))
		}
	}
	problems = append(problems, c.validate(raw)...)
	if len(problems) > 0 {
		return nil, &Error{Network: c.Name, Problems: problems}
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Queue == 0 {
		c.Queue = DefaultQueue
	}
	return c, nil
}

// validate lists what is wrong with c's values.
func (c *Config) validate(raw map[string]json.RawMessage) []string {
	var problems []string
	if _, ok := raw["name"]; ok && !nameRE.MatchString(c.Name) {
		problems = append(problems, fmt.Sprintf("name: %q is not a network name (letters, digits, _ . -)", c.Name))
	}
	if _, ok := raw["policy_networks"]; !ok {
		problems = append(problems, "policy_networks: missing; list the networks whose pod addresses NetworkPolicy applies to")
	}
	seen := map[string]bool{}
	for i, n := range c.PolicyNetworks {
		switch {
		case n == "":
			problems = append(problems, fmt.Sprintf("policy_networks[%d]: empty network name", i))
		case seen[n]:
			problems = append(problems, fmt.Sprintf("policy_networks[%d]: %q is listed twice", i, n))
		}
		seen[n] = true
	}
	if _, ok := raw["queue"]; ok && (c.Queue < 1 || c.Queue > 65535) {
		problems = append(problems, fmt.Sprintf("queue: %d is not an nfqueue number (1-65535)", c.Queue))
	}
	return problems
}

// typeProblem words a JSON decoding error of one key's value.
func typeProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("a JSON %s where %s is expected", te.Value, goTypeWord(te.Type.String()))
	}
	return err.Error()
}

func goTypeWord(t string) string {
	switch t {
	case "string":
		return "a string"
	case "[]string":
		return "a list of strings"
	case "int":
		return "an integer"
	case "bool":
		return "true or false"
	}
	return t
}

// Error is an invalid config: every problem found, each naming its key.
type Error struct {
	Network  string
	Problems []string
}

func (e *Error) Error() string {
	who := "config"
	if e.Network != "" {
		who = fmt.Sprintf("network %q: config", e.Network)
	}
	return who + ": " + strings.Join(e.Problems, "; ")
}
