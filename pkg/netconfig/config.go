// Package netconfig reads kurmad's boot config: the pod networks (each a
// plugin image plus the plugin's own config) and the daemon's settings.
//
// The file is JSON. Paths in it that are relative are resolved against the
// directory of the config file: file:// image URIs ("file://images/x.aci",
// "file://../x.aci"), trusted key files, signature_policy and registries_d. state_dir and run_dir must be
// absolute. Parse reports every problem it finds at once, as a
// *ValidationError whose lines each carry a path such as
// "pod_networks[2].name" and a hint on how to fix it.
package netconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Defaults for the settings a config may leave out.
const (
	DefaultStateDir = "/var/lib/kurma"
	DefaultRunDir   = "/run/kurma"
	// DefaultGCInterval is how often kurmad runs each network's gc.
	DefaultGCInterval = 10 * time.Minute
	// DefaultStatusInterval is how often kurmad asks each network's plugin
	// whether it can serve adds.
	DefaultStatusInterval = 30 * time.Second
	// DefaultRuntimeCheckInterval is how often kurmad looks for runtime
	// pods whose runtime dropped the container without a DEL that reached
	// it.
	DefaultRuntimeCheckInterval = 30 * time.Second
)

// The values of "verify", globally and per network: how much of an image's
// provenance a fetch demands. When neither says, the image fetcher decides
// (required when trusted_keys or signature_policy is set, none otherwise).
const (
	VerifyRequired = "required"
	VerifyIfSigned = "if-signed"
	VerifyNone     = "none"
)

// Config is a parsed and validated boot config.
type Config struct {
	Path               string        // file loaded from ("" when parsed from bytes)
	Networks           []*Network    // file order
	PluginTimeout      time.Duration // "plugin_timeout", default netplugin.DefaultTimeout
	StateDir           string        // "state_dir", default /var/lib/kurma
	RunDir             string        // "run_dir", default /run/kurma
	CgroupParent       string        // "cgroup_parent": the plugin containers' cgroup parent; "" → networkpod's default
	InsecureRegistries []string      // "insecure_registries": ["host:port", ...]
	TrustedKeys        []TrustedKey  // "trusted_keys": [{"prefix": "example.com/kurma", "key": "keys/kurma.asc"}]
	InsecureDiscovery  bool          // "insecure_discovery": allow plain-HTTP appc discovery
	// Verify is "verify", the mode of every network that names none
	// itself; "" when absent.
	Verify          string
	SignaturePolicy string // "signature_policy": a containers-policy.json for docker:// and OCI images
	RegistriesDir   string // "registries_d": a containers-registries.d directory (signature lookaside, sigstore attachments)
	// MaxImageSize is "max_image_size", the bytes an image may have,
	// compressed and uncompressed; 0 when absent: the image fetcher's
	// default (imagefetch.DefaultMaxSize, 2 GiB), which it enforces.
	MaxImageSize int64
	// FetchTimeout is "fetch_timeout", the longest one image fetch may
	// take; 0 when absent: the image fetcher's default
	// (imagefetch.DefaultFetchTimeout), which it enforces.
	FetchTimeout time.Duration
	// GCInterval ("gc_interval") is the time between two gc runs of each
	// network; 0 turns the periodic runs off (gc still runs after
	// reconcile). Default 10m.
	GCInterval time.Duration
	// CheckInterval ("check_interval") is the time between two checks of
	// every ready pod; 0 (the default) checks only when asked.
	CheckInterval time.Duration
	// StatusInterval ("status_interval") is the time between two status
	// probes of each network's plugin; default 30s.
	StatusInterval time.Duration
	// RuntimeCheckInterval ("runtime_check_interval") is the time between
	// two looks at the runtime pods (kurma-cni's): one whose runtime's
	// netns path names no namespace any more, or another one, is released;
	// one whose bind mount was lost while its container lives is bound
	// again. 0 looks only at boot. Default 30s.
	RuntimeCheckInterval time.Duration
	// MetricsListen ("metrics_listen") is where the Prometheus endpoint
	// listens: "host:port", or the absolute path of a unix socket; ""
	// (the default) serves no metrics.
	MetricsListen string
	// RedactKeys ("redact_keys") are plugin config keys whose values, at
	// any depth, are replaced in the call transcripts kurmad keeps.
	RedactKeys []string
}

// TrustedKey trusts an armored OpenPGP public key for images whose name
// starts with Prefix. A relative KeyFile is resolved against the config
// file's directory.
type TrustedKey struct{ Prefix, KeyFile string }

// Network is one entry of pod_networks.
type Network struct {
	Name string
	// ImageURI is the entry's "image" (or "aci", its former name): the
	// plugin image's URI, a relative file:// already resolved against the
	// config file's dir.
	ImageURI           string
	Default            bool
	ContainerInterface string // template source, "" when absent
	// Verify is the entry's "verify", else the config's; "" when neither
	// says.
	Verify string
	// VerifyByEntry is set when the entry itself says "verify" (Verify is
	// not inherited): only such a "none" lets an unpinned plain http://
	// image run unchecked.
	VerifyByEntry bool
	// ImageName is the name the image must carry ("image_name"); "" when
	// any name is accepted.
	ImageName string
	// AllowCapabilities ("allow_capabilities") are the capabilities beyond
	// the plugin containers' default set that this network consents to
	// grant when its image asks for them (see networkpod).
	AllowCapabilities []string
	// AllowSyscalls ("allow_syscalls") are the system calls the plugin
	// containers' seccomp filter denies that this network consents to let
	// its plugin make (see networkpod).
	AllowSyscalls []string
	// KubernetesCredentials ("kubernetes_credentials") gives the network's
	// plugin container kurmad's Kubernetes credentials read-only (its pod's
	// service account, the API server's address, the node's name; see
	// networkpod.Kubernetes). Without it a plugin sees none of them.
	KubernetesCredentials bool
	// Limits ("limits") bound the network's plugin container and its
	// calls; zero fields take the defaults.
	Limits Limits
	// MainSeesPods ("main_sees_pods") mounts the pods' network namespaces
	// in the container for its main executable; otherwise only a call
	// sees one, the one its arguments name.
	MainSeesPods bool
	// CNIVersion is the plugin config's "cniVersion" as written; "" when
	// it names none (kurma adds none: the plugin image decides).
	CNIVersion string
	// Role ("role") is RoleAttach (the default) or RolePolicy: the
	// network's image enforces policy on the networks with NetworkPolicy,
	// and pods never attach to it.
	Role string
	// NetworkPolicy ("network_policy") opts the network in to the policy
	// network's enforcement. It is not part of the network's definition:
	// turning it on or off starts no new generation of this network, only
	// of the policy network, whose config lists the networks it polices.
	NetworkPolicy bool
	// PolicyNetworks are, for the policy network, the names of the
	// networks with NetworkPolicy, in config order: kurmad writes them
	// into its plugin config as "policy_networks". Nil for the others.
	PolicyNetworks []string

	// path locates the entry in the config ("pod_networks[2]").
	path string
	// imageKey is the key the entry names its image with: "image", or
	// "aci".
	imageKey string
	// members is the whole entry in document order, values byte-for-byte.
	members []member
	// tmpl is ContainerInterface parsed; nil when there is none.
	tmpl *template.Template
}

// Arg is one per-pod argument for a network, e.g. IP=10.10.0.9.
type Arg struct{ Key, Value string }

// Keys of the top-level object and of a pod_networks entry.
const (
	keyPodNetworks        = "pod_networks"
	keyPodNetworksCamel   = "podNetworks"
	keyPluginTimeout      = "plugin_timeout"
	keyStateDir           = "state_dir"
	keyRunDir             = "run_dir"
	keyCgroupParent       = "cgroup_parent"
	keyInsecureRegistries = "insecure_registries"
	keyTrustedKeys        = "trusted_keys"
	keyInsecureDiscovery  = "insecure_discovery"
	keyVerify             = "verify"
	keySignaturePolicy    = "signature_policy"
	keyRegistriesDir      = "registries_d"
	keyMaxImageSize       = "max_image_size"
	keyFetchTimeout       = "fetch_timeout"
	keyGCInterval         = "gc_interval"
	keyCheckInterval      = "check_interval"
	keyStatusInterval     = "status_interval"
	keyRuntimeCheck       = "runtime_check_interval"
	keyMetricsListen      = "metrics_listen"
	keyRedactKeys         = "redact_keys"

	keyName  = "name"
	keyImage = "image"
	// keyACI is the former name of keyImage, still accepted (an entry with
	// both is an error).
	keyACI                = "aci"
	keyDefault            = "default"
	keyContainerInterface = "containerInterface"
	keyImageName          = "image_name"
	keyAllowCapabilities  = "allow_capabilities"
	keyAllowSyscalls      = "allow_syscalls"
	keyKubernetesCreds    = "kubernetes_credentials"
	keyLimits             = "limits"
	keyMainSeesPods       = "main_sees_pods"
	keyCNIVersion         = "cniVersion"
	keyArgs               = "args"
)

var topLevelKeys = []string{
	keyPodNetworks, keyPodNetworksCamel, keyPluginTimeout, keyStateDir, keyRunDir, keyCgroupParent,
	keyInsecureRegistries, keyTrustedKeys, keyInsecureDiscovery, keyVerify,
	keySignaturePolicy, keyRegistriesDir, keyMaxImageSize, keyFetchTimeout,
	keyGCInterval, keyCheckInterval, keyStatusInterval, keyRuntimeCheck, keyMetricsListen, keyRedactKeys,
}

// kurmaEntryKeys are the keys of a network entry that are kurma's, not the
// plugin's; they are stripped from the plugin config.
var kurmaEntryKeys = []string{keyImage, keyACI, keyDefault, keyContainerInterface, keyVerify, keyImageName, keyAllowCapabilities, keyAllowSyscalls,
	keyLimits, keyMainSeesPods, keyKubernetesCreds, keyRole, keyNetworkPolicy}

// Load reads the config file at path and parses it; relative paths in it
// are resolved against the file's directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg, err := parseConfig(data, filepath.Dir(abs), true)
	if err != nil {
		return nil, err
	}
	cfg.Path = abs
	return cfg, nil
}

// Parse parses and validates a config. Relative paths are resolved against
// baseDir (the working directory when baseDir is ""). The error, if any, is
// a *ValidationError listing every problem found.
func Parse(data []byte, baseDir string) (*Config, error) {
	return parseConfig(data, baseDir, false)
}

// parseConfig is Parse; with files it also reports, among the other problems,
// each file or dir the config names for trust (trusted_keys' keys,
// signature_policy, registries_d) that cannot be read: Load's, which reads
// the config from disk.
func parseConfig(data []byte, baseDir string, files bool) (*Config, error) {
	if baseDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("resolve relative paths: %w", err)
		}
		baseDir = wd
	}
	var ps problems
	top, ok := decodeTop(&ps, data)
	if !ok {
		return nil, ps.err()
	}
	t := &topLevel{ps: &ps, baseDir: baseDir, cfg: &Config{
		PluginTimeout:        netplugin.DefaultTimeout,
		StateDir:             DefaultStateDir,
		RunDir:               DefaultRunDir,
		GCInterval:           DefaultGCInterval,
		StatusInterval:       DefaultStatusInterval,
		RuntimeCheckInterval: DefaultRuntimeCheckInterval,
	}}
	seen := map[string]bool{}
	for _, m := range top {
		if seen[m.Key] {
			ps.add(m.Key, "the key appears more than once; keep only one")
			continue
		}
		seen[m.Key] = true
		if parse, ok := topLevelParsers[m.Key]; ok {
			parse(t, m.Key, m.Value)
		} else {
			unknownTopLevelKey(&ps, m.Key)
		}
	}
	checkVerifiable(&ps, t.cfg, t.networksKey)
	inheritVerify(t.cfg)
	checkTrust(&ps, t.cfg)
	checkDefaultInterfaces(&ps, t.cfg.Networks)
	checkPolicy(&ps, t.cfg.Networks)
	if files {
		checkTrustFiles(&ps, t.cfg)
		checkRelativeImages(&ps, t.cfg, t.networksKey, baseDir)
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return t.cfg, nil
}

// decodeTop decodes the file into its top-level members, or adds the one
// problem that stops everything else: bad JSON or not an object.
func decodeTop(ps *problems, data []byte) ([]member, bool) {
	// A UTF-8 byte order mark (some editors write one) is no content; a
	// UTF-16 one means a file JSON cannot be.
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if bytes.HasPrefix(data, []byte("\xff\xfe")) || bytes.HasPrefix(data, []byte("\xfe\xff")) {
		ps.add("", "the file is UTF-16 (it starts with a UTF-16 byte order mark); save it as UTF-8")
		return nil, false
	}
	if msg, ok := syntaxProblem(data); !ok {
		ps.add("", msg)
		return nil, false
	}
	if k := jsonKind(data); k != "an object" {
		ps.add("", fmt.Sprintf("the config must be a JSON object ({...}), got %s", k))
		return nil, false
	}
	top, err := decodeObject(data)
	if err != nil {
		ps.add("", fmt.Sprintf("invalid JSON: %v", err))
		return nil, false
	}
	return top, true
}

// topLevel is one Parse's progress through the top-level keys.
type topLevel struct {
	ps      *problems
	cfg     *Config
	baseDir string
	// networksKey is the spelling of pod_networks the file used, "" until
	// one was seen.
	networksKey string
}

// topLevelParsers parse each top-level key into the Config, adding
// problems for what is wrong; a key not here is unknown.
var topLevelParsers = map[string]func(t *topLevel, key string, raw json.RawMessage){
	keyPodNetworks:        (*topLevel).networks,
	keyPodNetworksCamel:   (*topLevel).networks,
	keyPluginTimeout:      durationKey(func(c *Config) *time.Duration { return &c.PluginTimeout }, parseDuration),
	keyFetchTimeout:       durationKey(func(c *Config) *time.Duration { return &c.FetchTimeout }, parseDuration),
	keyStatusInterval:     durationKey(func(c *Config) *time.Duration { return &c.StatusInterval }, parseDuration),
	keyGCInterval:         durationKey(func(c *Config) *time.Duration { return &c.GCInterval }, parseInterval),
	keyCheckInterval:      durationKey(func(c *Config) *time.Duration { return &c.CheckInterval }, parseInterval),
	keyRuntimeCheck:       durationKey(func(c *Config) *time.Duration { return &c.RuntimeCheckInterval }, parseInterval),
	keyStateDir:           dirKey(func(c *Config) *string { return &c.StateDir }, DefaultStateDir),
	keyRunDir:             dirKey(func(c *Config) *string { return &c.RunDir }, DefaultRunDir),
	keyCgroupParent:       (*topLevel).cgroupParent,
	keyInsecureRegistries: (*topLevel).insecureRegistries,
	keyMaxImageSize:       (*topLevel).maxImageSize,
	keyMetricsListen: func(t *topLevel, key string, raw json.RawMessage) {
		t.cfg.MetricsListen = parseListen(t.ps, key, raw)
	},
	keyRedactKeys: func(t *topLevel, key string, raw json.RawMessage) {
		t.cfg.RedactKeys = parseRedactKeys(t.ps, key, raw)
	},
	keyTrustedKeys: func(t *topLevel, key string, raw json.RawMessage) {
		t.cfg.TrustedKeys = parseTrustedKeys(t.ps, key, raw, t.baseDir)
	},
	keyInsecureDiscovery: func(t *topLevel, key string, raw json.RawMessage) {
		decodeTyped(t.ps, key, raw, &t.cfg.InsecureDiscovery, "a boolean (true or false)")
	},
	keyVerify: func(t *topLevel, key string, raw json.RawMessage) {
		t.cfg.Verify = parseVerify(t.ps, key, raw)
	},
	keySignaturePolicy: func(t *topLevel, key string, raw json.RawMessage) {
		t.cfg.SignaturePolicy = parsePath(t.ps, key, raw, t.baseDir, "a containers-policy.json file")
	},
	keyRegistriesDir: func(t *topLevel, key string, raw json.RawMessage) {
		t.cfg.RegistriesDir = parsePath(t.ps, key, raw, t.baseDir, "a containers-registries.d directory")
	},
}

// networks parses pod_networks (or its camel-case spelling; not both).
func (t *topLevel) networks(key string, raw json.RawMessage) {
	if t.networksKey != "" {
		t.ps.add(key, fmt.Sprintf("both %q and %q are set; use only %q", t.networksKey, key, keyPodNetworks))
		return
	}
	t.networksKey = key
	t.cfg.Networks = parseNetworks(t.ps, key, raw, t.baseDir)
}

// durationKey parses a duration key with parse (parseDuration, or
// parseInterval where 0s turns the work off) into the field field returns.
func durationKey(field func(*Config) *time.Duration,
	parse func(*problems, string, json.RawMessage) (time.Duration, bool)) func(*topLevel, string, json.RawMessage) {
	return func(t *topLevel, key string, raw json.RawMessage) {
		if d, ok := parse(t.ps, key, raw); ok {
			*field(t.cfg) = d
		}
	}
}

// dirKey parses an absolute directory key (state_dir, run_dir) into the
// field field returns; example is the default, quoted when the value is
// not absolute.
func dirKey(field func(*Config) *string, example string) func(*topLevel, string, json.RawMessage) {
	return func(t *topLevel, key string, raw json.RawMessage) {
		var s string
		if !decodeTyped(t.ps, key, raw, &s, "a string (an absolute directory path)") {
			return
		}
		if s == "" || !filepath.IsAbs(s) {
			t.ps.add(key, fmt.Sprintf("%q must be an absolute path such as %q", s, example))
			return
		}
		*field(t.cfg) = filepath.Clean(s)
	}
}

// cgroupParent parses cgroup_parent: a relative cgroup path, one or more
// names such as "kurma" or "kurma/node-1".
func (t *topLevel) cgroupParent(key string, raw json.RawMessage) {
	var s string
	if !decodeTyped(t.ps, key, raw, &s, `a string such as "kurma-node1"`) {
		return
	}
	if msg := checkCgroupParent(s); msg != "" {
		t.ps.add(key, msg)
		return
	}
	t.cfg.CgroupParent = s
}

// checkCgroupParent says what is wrong with a cgroup_parent, "" when
// nothing is.
func checkCgroupParent(s string) string {
	if s == "" || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") {
		return fmt.Sprintf("%q must be a cgroup path relative to the root of the hierarchies, such as \"kurma-node1\" or \"kurma/node1\"", s)
	}
	for _, part := range strings.Split(s, "/") {
		if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "\x00\n") {
			return fmt.Sprintf("%q has an empty, \".\" or \"..\" part; write names separated by single slashes, such as \"kurma/node1\"", s)
		}
	}
	return ""
}

func (t *topLevel) insecureRegistries(key string, raw json.RawMessage) {
	list, ok := decodeStrings(t.ps, key, raw, `a list of "host:port" strings such as ["localhost:5000"]`)
	if !ok {
		return
	}
	for i, r := range list {
		if msg := checkRegistry(r); msg != "" {
			t.ps.add(fmt.Sprintf("%s[%d]", key, i), msg)
		}
	}
	t.cfg.InsecureRegistries = list
}

func (t *topLevel) maxImageSize(key string, raw json.RawMessage) {
	var n int64
	if !decodeTyped(t.ps, key, raw, &n, "a whole number of bytes such as 2147483648") {
		return
	}
	if n <= 0 {
		t.ps.add(key, fmt.Sprintf("%d must be greater than zero, e.g. 2147483648 (2 GiB)", n))
		return
	}
	t.cfg.MaxImageSize = n
}

// unknownTopLevelKey names the known key the user probably meant, or lists
// them all.
func unknownTopLevelKey(ps *problems, key string) {
	msg := "unknown key"
	if s := suggest(key, topLevelKeys); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	} else {
		msg += "; known keys are " + quotedList(slices.DeleteFunc(slices.Clone(topLevelKeys),
			func(k string) bool { return k == keyPodNetworksCamel }))
	}
	ps.add(key, msg)
}

// quotedList writes keys as `"a", "b" and "c"`.
func quotedList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// parseDuration reads a positive Go duration string.
func parseDuration(ps *problems, path string, raw json.RawMessage) (time.Duration, bool) {
	var s string
	if !decodeTyped(ps, path, raw, &s, `a Go duration string such as "1m" or "30s"`) {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		ps.add(path, fmt.Sprintf("%q is not a duration; write it like \"1m\", \"90s\" or \"1m30s\"", s))
	case d <= 0:
		ps.add(path, fmt.Sprintf("%q must be greater than zero, e.g. \"1m\"", s))
	default:
		return d, true
	}
	return 0, false
}

// parseInterval reads a Go duration string that may be zero ("0s": off).
func parseInterval(ps *problems, path string, raw json.RawMessage) (time.Duration, bool) {
	var s string
	if !decodeTyped(ps, path, raw, &s, `a Go duration string such as "10m", or "0s" for never`) {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		ps.add(path, fmt.Sprintf("%q is not a duration; write it like \"10m\" or \"90s\", or \"0s\" for never", s))
	case d < 0:
		ps.add(path, fmt.Sprintf("%q is negative; write a duration such as \"10m\", or \"0s\" for never", s))
	default:
		return d, true
	}
	return 0, false
}

// syntaxProblem checks that data is one well-formed JSON value and, if not,
// says where it breaks as line:column.
func syntaxProblem(data []byte) (string, bool) {
	var v any
	err := json.Unmarshal(data, &v)
	if err == nil {
		return "", true
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off := se.Offset
		if off > 0 && off <= int64(len(data)) && len(bytes.TrimSpace(data[:off])) > 0 &&
			se.Error() != "unexpected end of JSON input" {
			off-- // Offset counts the offending byte; point at it
		}
		line, col := lineCol(data, off)
		return fmt.Sprintf("invalid JSON at line %d:%d: %v", line, col, se), false
	}
	return fmt.Sprintf("invalid JSON: %v", err), false
}

// decodeTyped unmarshals a scalar raw into v and, when its JSON type is
// wrong, records a problem naming the expected type.
func decodeTyped(ps *problems, path string, raw json.RawMessage, v any, want string) bool {
	if jsonKind(raw) == "null" || json.Unmarshal(raw, v) != nil {
		ps.add(path, fmt.Sprintf("expected %s, got %s", want, jsonKind(raw)))
		return false
	}
	return true
}

// decodeStrings decodes a JSON array of strings, recording a problem for
// each element of the wrong type.
func decodeStrings(ps *problems, path string, raw json.RawMessage, want string) ([]string, bool) {
	if jsonKind(raw) != "an array" {
		ps.add(path, fmt.Sprintf("expected %s, got %s", want, jsonKind(raw)))
		return nil, false
	}
	elems, err := decodeArray(raw)
	if err != nil {
		ps.add(path, fmt.Sprintf("expected %s: %v", want, err))
		return nil, false
	}
	out := make([]string, 0, len(elems))
	ok := true
	for i, e := range elems {
		var s string
		if !decodeTyped(ps, fmt.Sprintf("%s[%d]", path, i), e, &s, "a string") {
			ok = false
			continue
		}
		out = append(out, s)
	}
	return out, ok
}

// decodeNames reads a list of names out of known (system calls,
// capabilities: an operator's consent to more than the default): each
// name is kept once; a repeated one, or one not in known, is a problem at
// its element's path, the latter worded by unknown.
func decodeNames(ps *problems, path string, raw json.RawMessage, want string, known []string, unknown func(name string) string) []string {
	names, ok := decodeStrings(ps, path, raw, want)
	if !ok {
		return nil
	}
	var out []string
	for i, name := range names {
		ep := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case slices.Contains(out, name):
			ps.add(ep, fmt.Sprintf("%q is listed twice; keep one", name))
		case slices.Contains(known, name):
			out = append(out, name)
		default:
			ps.add(ep, unknown(name))
		}
	}
	return out
}

// Network returns the network with the given name.
func (c *Config) Network(name string) (*Network, bool) {
	for _, n := range c.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return nil, false
}

// Defaults returns the networks marked default, in config order: those a
// pod gets when its request names none (never the policy network).
func (c *Config) Defaults() []*Network {
	var out []*Network
	for _, n := range c.Networks {
		if n.Default {
			out = append(out, n)
		}
	}
	return out
}

// Names returns the names of all networks in config order.
func (c *Config) Names() []string {
	out := make([]string, len(c.Networks))
	for i, n := range c.Networks {
		out[i] = n.Name
	}
	return out
}

// AttachNames returns the names of the networks pods attach to (all but
// the policy network), in config order: those whose plugins kurmad calls
// for pods (add, del, check, gc).
func (c *Config) AttachNames() []string {
	var out []string
	for _, n := range c.Networks {
		if !n.IsPolicy() {
			out = append(out, n.Name)
		}
	}
	return out
}
