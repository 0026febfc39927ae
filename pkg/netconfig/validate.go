package netconfig

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kurma-project/kurma/pkg/imagefetch/imageref"
)

// MaxNameLen is the longest network name: names end up in container ids,
// directory names and cgroup names.
const MaxNameLen = 63

// nameRE is CNI 1.0's rule for network names. Every name kurma derives from
// one stays valid: "kurma-net-<name>" is a libcontainer id ([A-Za-z0-9_+.-]),
// and since the first character is a letter or digit a name is never "." or
// ".." as a directory or cgroup name.
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// checkName says what is wrong with a network name, or "" when it is valid.
func checkName(name string) string {
	switch {
	case name == "":
		return `must not be empty; use a name such as "mynet"`
	case len(name) > MaxNameLen:
		return fmt.Sprintf("%q is %d characters long; use at most %d", name, len(name), MaxNameLen)
	case !nameRE.MatchString(name):
		return fmt.Sprintf("%q is not a valid network name; use letters, digits, '_', '.' and '-', starting with a letter or digit (CNI's rule; e.g. %q)",
			name, suggestName(name))
	}
	return ""
}

// suggestName turns an invalid name into a valid one for the hint.
func suggestName(name string) string {
	var b strings.Builder
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.TrimLeft(b.String(), "-_.")
	if len(s) > MaxNameLen {
		s = s[:MaxNameLen]
	}
	if s == "" {
		return "mynet"
	}
	return s
}

var hostLabelRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$`)

// checkRegistry says what is wrong with an insecure registry entry
// ("host" or "host:port"), or "" when it is valid.
func checkRegistry(r string) string {
	const hint = `write it as host:port, e.g. "localhost:5000" or "10.0.0.5:5000"`
	if r == "" {
		return "must not be empty; " + hint
	}
	if strings.Contains(r, "://") {
		return fmt.Sprintf("%q has a scheme; drop it: %s", r, hint)
	}
	if strings.ContainsAny(r, "/ \t\r\n") {
		return fmt.Sprintf("%q is not a registry address; %s", r, hint)
	}
	host := r
	if strings.Contains(r, ":") && !(strings.Count(r, ":") > 1 && !strings.HasPrefix(r, "[")) {
		h, port, err := net.SplitHostPort(r)
		if err != nil {
			return fmt.Sprintf("%q is not a registry address (%v); %s", r, err, hint)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("%q has an invalid port %q (1-65535); %s", r, port, hint)
		}
		host = h
	}
	if net.ParseIP(host) != nil {
		return ""
	}
	if len(host) > 253 {
		return fmt.Sprintf("%q: host name too long; %s", r, hint)
	}
	for _, label := range strings.Split(host, ".") {
		if len(label) > 63 || !hostLabelRE.MatchString(label) {
			return fmt.Sprintf("%q has an invalid host name; %s", r, hint)
		}
	}
	return ""
}

// suggest returns the known key closest to key when it is a likely typo
// (same letters ignoring case and '_'/'-', or at most two edits away).
func suggest(key string, known []string) string {
	if s := sameKeyIgnoringCase(key, known); s != "" {
		return s
	}
	best, bestDist := "", 3
	for _, k := range known {
		if d := levenshtein(strings.ToLower(key), strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// sameKeyIgnoringCase returns the known key that key spells differently
// only in case or '_'/'-' ("container_interface" → "containerInterface").
func sameKeyIgnoringCase(key string, known []string) string {
	nkey := normKey(key)
	for _, k := range known {
		if k != key && normKey(k) == nkey {
			return k
		}
	}
	return ""
}

// normKey is a key without case, underscores and dashes. A replacer is
// built on first use; one built for each call was a tenth of a 20-network
// boot's CPU (every key of every network is checked against every known
// key).
func normKey(s string) string { return strings.ToLower(keySeparators.Replace(s)) }

var keySeparators = strings.NewReplacer("_", "", "-", "")

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

var verifyModes = []string{VerifyRequired, VerifyIfSigned, VerifyNone}

// parseVerify reads a "verify" value: "required", "if-signed" or "none".
func parseVerify(ps *problems, path string, raw json.RawMessage) string {
	const want = `one of "required", "if-signed" or "none"`
	var s string
	if !decodeTyped(ps, path, raw, &s, "a string, "+want) {
		return ""
	}
	if !slices.Contains(verifyModes, s) {
		ps.add(path, fmt.Sprintf("%q is not a verify mode; use %s", s, want))
		return ""
	}
	return s
}

// parsePath reads a file or directory path, resolving a relative one
// against baseDir.
func parsePath(ps *problems, path string, raw json.RawMessage, baseDir, what string) string {
	var s string
	if !decodeTyped(ps, path, raw, &s, "a string (the path of "+what+")") {
		return ""
	}
	if s == "" {
		ps.add(path, fmt.Sprintf("must name %s (relative paths are resolved against the config file's directory); remove the key to use none", what))
		return ""
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(baseDir, s)
	}
	return filepath.Clean(s)
}

// checkImageName says what is wrong with an image_name, or "" when it is an
// appc name ("example.com/kurma/net") or a docker repository
// ("registry.example.com:5000/kurma/net", no tag or digest).
func checkImageName(s string) string {
	const hint = `write the name the image must carry, e.g. "example.com/kurma/cni-netplugin" (an ACI's manifest name) or "registry.example.com/kurma/cni-netplugin" (a docker:// repository, without tag or digest)`
	if s == "" {
		return "must not be empty; " + hint
	}
	if imageref.IsName(s) {
		return ""
	}
	return fmt.Sprintf("%q is not an image name; %s", s, hint)
}

// inheritVerify gives every network that names no verify mode the
// config's.
func inheritVerify(cfg *Config) {
	for _, n := range cfg.Networks {
		if n.Verify == "" {
			n.Verify = cfg.Verify
		}
	}
}

// checkVerifiable refuses "verify": "required" when nothing could verify
// an image: no trusted key and no signature policy. It runs before
// inheritVerify, so each mode is reported where it is written.
func checkVerifiable(ps *problems, cfg *Config, networksKey string) {
	if len(cfg.TrustedKeys) > 0 || cfg.SignaturePolicy != "" {
		return
	}
	const msg = `"required" needs something to verify images with; add trusted_keys (for ACIs) or signature_policy (for docker:// and OCI images), or use "if-signed" or "none"`
	if cfg.Verify == VerifyRequired {
		ps.add(keyVerify, msg)
	}
	for i, n := range cfg.Networks {
		if n.Verify == VerifyRequired {
			ps.add(fmt.Sprintf("%s[%d].%s", networksKey, i, keyVerify), msg)
		}
	}
}

// EffectiveVerify is the verify mode n's image is fetched under: its own or
// the config's, else the default ("required" when trusted_keys or
// signature_policy is set, "none" otherwise).
func (cfg *Config) EffectiveVerify(n *Network) string {
	switch {
	case n.Verify != "":
		return n.Verify
	case len(cfg.TrustedKeys) > 0 || cfg.SignaturePolicy != "":
		return VerifyRequired
	}
	return VerifyNone
}

// checkTrust refuses the configs under which an image could sidestep its
// verification:
//
//   - a file:// or http(s):// ACI under "required" without image_name, when
//     trusted_keys trust keys for different name prefixes: the key that
//     must have signed the image would be chosen by the name the image
//     gives itself, so one vendor's signed image could run as another's
//     network (discovery and docker:// bind the name through the URI);
//   - an unpinned plain http:// image that no signature check covers,
//     unless the network itself says "verify": "none": a default never
//     lets what any machine on the path could replace run unchecked.
func checkTrust(ps *problems, cfg *Config) {
	prefixed := slices.ContainsFunc(cfg.TrustedKeys, func(k TrustedKey) bool { return k.Prefix != "" })
	for _, n := range cfg.Networks {
		verify := cfg.EffectiveVerify(n)
		scheme, rest, _ := imageref.Split(n.ImageURI)
		if sc, ok := imageref.Lookup(scheme); !ok || !sc.SelfNamed {
			continue
		}
		if verify == VerifyRequired && n.ImageName == "" && prefixed {
			ps.add(n.path, `verify is "required" and trusted_keys trust keys for different name prefixes, so without "image_name" the key that must have signed this image would be chosen by the name the image gives itself, and an image signed by one prefix's key could run as this network: add "image_name": "<the name in the image's manifest>" (the key trusted for that name must have signed it)`)
		}
		if strings.EqualFold(scheme, "http") && !strings.Contains(rest, "#") && verify == VerifyNone && !n.VerifyByEntry {
			ps.add(n.path+"."+n.imageKey, fmt.Sprintf(`%q is plain http:// without a "#sha512-..." pin, and verify is "none" by default, so nothing would check what arrives: use https://, pin the image ID (#sha512-<128 hex>), require a signature (trusted_keys, verify "required" or "if-signed"), or write "verify": "none" in this network to run it unchecked`, n.ImageURI))
		}
	}
}

// checkDefaultInterfaces refuses two default networks whose
// containerInterface renders one fixed name (no {{num}}, {{uuid}} or
// {{random}} in it): a pod created without networks joins both, and the
// second could never take its interface.
func checkDefaultInterfaces(ps *problems, nets []*Network) {
	first := map[string]*Network{}
	for _, n := range nets {
		if !n.Default || n.tmpl == nil {
			continue
		}
		name, fixed := fixedInterface(n)
		if !fixed {
			continue
		}
		if prev, ok := first[name]; ok {
			ps.add(n.path+"."+keyContainerInterface, fmt.Sprintf(`%q is also the interface of default network %q (%s): a pod created without networks joins both, and its second could not take the name; give one a template that differs (e.g. "eth{{num}}")`,
				name, prev.Name, prev.path))
			continue
		}
		first[name] = n
	}
}

// fixedInterface is the name n's containerInterface renders for every pod
// and attachment, when it renders only one.
func fixedInterface(n *Network) (string, bool) {
	a, randA, errA := render(n.tmpl, sampleUUID, 0, rand.IntN)
	b, randB, errB := render(n.tmpl, "00000000-0000-4000-8000-000000000000", 1, rand.IntN)
	return a, errA == nil && errB == nil && !randA && !randB && a == b
}

// checkTrustFiles reports each trust file or dir the config names that
// cannot be read, with the config's other problems (Load).
func checkTrustFiles(ps *problems, cfg *Config) {
	for i, tk := range cfg.TrustedKeys {
		if tk.KeyFile == "" {
			continue
		}
		if _, err := os.Stat(tk.KeyFile); err != nil {
			ps.add(fmt.Sprintf("%s[%d].key", keyTrustedKeys, i), fmt.Sprintf("cannot read the key file: %v", err))
		}
	}
	if cfg.SignaturePolicy != "" {
		if _, err := os.Stat(cfg.SignaturePolicy); err != nil {
			ps.add(keySignaturePolicy, fmt.Sprintf("cannot read the policy file: %v", err))
		}
	}
	if cfg.RegistriesDir != "" {
		if fi, err := os.Stat(cfg.RegistriesDir); err != nil {
			ps.add(keyRegistriesDir, fmt.Sprintf("cannot read the directory: %v", err))
		} else if !fi.IsDir() {
			ps.add(keyRegistriesDir, fmt.Sprintf("%s is not a directory", cfg.RegistriesDir))
		}
	}
}
