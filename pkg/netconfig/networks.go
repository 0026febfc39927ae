package netconfig

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kurma-project/kurma/pkg/imagefetch/imageref"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Keys of a pod_networks entry (verify is the top level's too).
const (
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

// kurmaEntryKeys are the keys of a network entry that are kurma's, not the
// plugin's; they are stripped from the plugin config.
var kurmaEntryKeys = []string{keyImage, keyACI, keyDefault, keyContainerInterface, keyVerify, keyImageName, keyAllowCapabilities, keyAllowSyscalls,
	keyLimits, keyMainSeesPods, keyKubernetesCreds, keyRole, keyNetworkPolicy}

// parseNetworks reads the pod_networks array. Problems are recorded in ps;
// the returned networks are only meaningful when ps stays empty.
func parseNetworks(ps *problems, key string, raw json.RawMessage, baseDir string) []*Network {
	if jsonKind(raw) != "an array" {
		ps.add(key, fmt.Sprintf("expected a list of network objects ([{\"name\": ...}, ...]), got %s", jsonKind(raw)))
		return nil
	}
	elems, err := decodeArray(raw)
	if err != nil {
		ps.add(key, fmt.Sprintf("invalid list: %v", err))
		return nil
	}
	var nets []*Network
	first := map[string]int{} // lowercased network name → index in nets of its first entry
	for i, e := range elems {
		path := fmt.Sprintf("%s[%d]", key, i)
		n := parseNetwork(ps, path, e, baseDir)
		if n == nil {
			continue
		}
		if n.Name != "" {
			fold := strings.ToLower(n.Name)
			if j, dup := first[fold]; dup {
				ps.add(path+"."+keyName, duplicateName(n.Name, nets[j].Name, nets[j].path))
			} else {
				first[fold] = len(nets)
			}
		}
		n.path = path
		nets = append(nets, n)
	}
	return nets
}

// duplicateName is the problem with a network named name when an earlier
// entry, at prevPath, is named prev, the same ignoring case. Names that
// differ only in case are refused too: a network's name is its directories'
// and cgroup's name, which must not meet on a filesystem that folds case.
func duplicateName(name, prev, prevPath string) string {
	if name == prev {
		return fmt.Sprintf("%q is used twice (also %s); network names must be unique", name, prevPath)
	}
	return fmt.Sprintf("%q and %q (%s) differ only in case; network names must differ in more than case, since each names its network's directories, container and cgroup",
		name, prev, prevPath)
}

// parseNetwork reads one pod_networks entry.
func parseNetwork(ps *problems, path string, raw json.RawMessage, baseDir string) *Network {
	if jsonKind(raw) != "an object" {
		ps.add(path, fmt.Sprintf("expected a network object ({\"name\": ..., \"image\": ..., ...}), got %s", jsonKind(raw)))
		return nil
	}
	ms, err := decodeObject(raw)
	if err != nil {
		ps.add(path, fmt.Sprintf("invalid object: %v", err))
		return nil
	}
	n := &Network{members: ms, Role: RoleAttach}
	seen := map[string]bool{}
	for _, m := range ms {
		mp := path + "." + m.Key
		if seen[m.Key] {
			ps.add(mp, "the key appears more than once in this network; keep only one")
			continue
		}
		seen[m.Key] = true
		n.parseKey(ps, mp, m.Key, m.Value, baseDir)
	}
	if seen[keyImage] && seen[keyACI] {
		ps.add(path+"."+keyACI, `both "image" and "aci" name the plugin image; keep "image" alone ("aci" is its former name)`)
	}
	checkRequired(ps, path, seen[keyName], seen[keyImage] || seen[keyACI])
	n.checkPolicyEntry(ps, path, seen)
	if len(raw) > netplugin.MaxConfigSize {
		ps.add(path, fmt.Sprintf("the entry is %d bytes; a plugin's config may be at most %d bytes (%d MiB), which every call hands the plugin on its stdin",
			len(raw), netplugin.MaxConfigSize, netplugin.MaxConfigSize>>20))
	}
	return n
}

// parseKey parses one key of a network entry at path mp. Keys that are not
// kurma's go to the plugin untouched; one that looks like a misspelt kurma
// key is a problem.
func (n *Network) parseKey(ps *problems, mp, key string, raw json.RawMessage, baseDir string) {
	switch key {
	case keyName:
		n.parseName(ps, mp, raw)
	case keyImage, keyACI:
		n.imageKey = key
		n.parseImage(ps, mp, raw, baseDir)
	case keyDefault:
		decodeTyped(ps, mp, raw, &n.Default, "a boolean (true or false)")
	case keyContainerInterface:
		n.parseContainerInterface(ps, mp, raw)
	case keyVerify:
		n.Verify = parseVerify(ps, mp, raw)
		n.VerifyByEntry = true
	case keyImageName:
		if !decodeTyped(ps, mp, raw, &n.ImageName, `a string such as "example.com/kurma/cni-netplugin"`) {
			return
		}
		if msg := checkImageName(n.ImageName); msg != "" {
			ps.add(mp, msg)
		}
	case keyAllowCapabilities:
		n.AllowCapabilities = parseAllowCapabilities(ps, mp, raw)
	case keyAllowSyscalls:
		n.AllowSyscalls = parseAllowSyscalls(ps, mp, raw)
	case keyKubernetesCreds:
		decodeTyped(ps, mp, raw, &n.KubernetesCredentials, "a boolean (true or false)")
	case keyLimits:
		n.Limits = parseLimits(ps, mp, raw)
	case keyMainSeesPods:
		decodeTyped(ps, mp, raw, &n.MainSeesPods, "a boolean (true or false)")
	case keyRole:
		if r := parseRole(ps, mp, raw); r != "" {
			n.Role = r
		}
	case keyNetworkPolicy:
		decodeTyped(ps, mp, raw, &n.NetworkPolicy, "a boolean (true or false)")
	case keyCNIVersion:
		if !decodeTyped(ps, mp, raw, &n.CNIVersion, `a version string such as "1.0.0"`) {
			return
		}
		if n.CNIVersion == "" {
			ps.add(mp, `must not be empty; write a version such as "1.0.0", or remove it to leave the version to the plugin image`)
		}
	case keyArgs:
		checkArgs(ps, mp, raw)
	default:
		switch s := misspeltKurmaKey(key); s {
		case "":
		case keyPolicyNetworks:
			ps.add(mp, fmt.Sprintf(`unknown key; did you mean %q? kurmad writes that key into the policy network's config itself (the networks with "network_policy": true): remove it, and set "network_policy" on the networks to police`, s))
		default:
			ps.add(mp, fmt.Sprintf("unknown key; did you mean %q? (kurma's keys are case-sensitive, and a key this close to one of them is taken for a slip; any other key goes to the plugin)", s))
		}
	}
}

func (n *Network) parseName(ps *problems, mp string, raw json.RawMessage) {
	if !decodeTyped(ps, mp, raw, &n.Name, `a string such as "mynet"`) {
		return
	}
	if msg := checkName(n.Name); msg != "" {
		ps.add(mp, msg)
		n.Name = "" // do not report it again as a duplicate
	}
}

func (n *Network) parseImage(ps *problems, mp string, raw json.RawMessage, baseDir string) {
	var s string
	if !decodeTyped(ps, mp, raw, &s, `a string such as "file:///var/lib/kurma/cni-netplugin.aci"`) {
		return
	}
	uri, msg := imageref.Resolve(s, baseDir)
	if msg != "" {
		ps.add(mp, msg)
		return
	}
	n.ImageURI = uri
}

func (n *Network) parseContainerInterface(ps *problems, mp string, raw json.RawMessage) {
	var s string
	if !decodeTyped(ps, mp, raw, &s, `a string template such as "eth{{num}}"`) {
		return
	}
	t, msg := parseInterfaceTemplate(s)
	if msg != "" {
		ps.add(mp, msg)
		return
	}
	n.ContainerInterface, n.tmpl = s, t
}

// finish completes n's definition once the whole config is read: its
// role, and the plugin config (the policy network's lists the networks it
// polices).
func (n *Network) finish() {
	n.Policy = n.IsPolicy()
	n.Config, _ = n.PluginConfig(nil) // without args it cannot fail
}

// checkRequired reports a network entry's missing name or image.
func checkRequired(ps *problems, path string, hasName, hasImage bool) {
	if !hasName {
		ps.add(path+"."+keyName, `missing; every network needs a unique name such as "mynet"`)
	}
	if !hasImage {
		ps.add(path+"."+keyImage, `missing; name the plugin image, e.g. "file:///var/lib/kurma/cni-netplugin.aci" or "example.com/kurma/cni-netplugin:v1"`)
	}
}

// checkArgs checks that a plugin config's "args" is an object whose "cni",
// if present, is an object too: per-pod args are merged into it.
func checkArgs(ps *problems, path string, raw json.RawMessage) {
	if jsonKind(raw) != "an object" {
		ps.add(path, fmt.Sprintf(`expected an object such as {"cni": {...}} (CNI conventions), got %s`, jsonKind(raw)))
		return
	}
	ms, err := decodeObject(raw)
	if err != nil {
		ps.add(path, fmt.Sprintf("invalid object: %v", err))
		return
	}
	for _, m := range ms {
		if m.Key == "cni" && jsonKind(m.Value) != "an object" {
			ps.add(path+".cni", fmt.Sprintf("expected an object of per-pod arguments, got %s", jsonKind(m.Value)))
		}
	}
}

// parseTrustedKeys reads trusted_keys: [{"prefix": ..., "key": ...}].
func parseTrustedKeys(ps *problems, key string, raw json.RawMessage, baseDir string) []TrustedKey {
	const want = `a list such as [{"prefix": "example.com/kurma", "key": "keys/kurma.asc"}]`
	if jsonKind(raw) != "an array" {
		ps.add(key, fmt.Sprintf("expected %s, got %s", want, jsonKind(raw)))
		return nil
	}
	elems, err := decodeArray(raw)
	if err != nil {
		ps.add(key, fmt.Sprintf("expected %s: %v", want, err))
		return nil
	}
	var out []TrustedKey
	for i, e := range elems {
		path := fmt.Sprintf("%s[%d]", key, i)
		if jsonKind(e) != "an object" {
			ps.add(path, fmt.Sprintf(`expected an object such as {"prefix": "example.com/kurma", "key": "keys/kurma.asc"}, got %s`, jsonKind(e)))
			continue
		}
		ms, err := decodeObject(e)
		if err != nil {
			ps.add(path, fmt.Sprintf("invalid object: %v", err))
			continue
		}
		var tk TrustedKey
		seen := map[string]bool{}
		for _, m := range ms {
			mp := path + "." + m.Key
			if seen[m.Key] {
				ps.add(mp, "the key appears more than once; keep only one")
				continue
			}
			seen[m.Key] = true
			switch m.Key {
			case "prefix":
				if !decodeTyped(ps, mp, m.Value, &tk.Prefix, `a string such as "example.com/kurma"`) {
					continue
				}
				if strings.ContainsAny(tk.Prefix, " \t\r\n") {
					ps.add(mp, fmt.Sprintf(`%q is not an image name prefix; write one such as "example.com/kurma", or "" for every name`, tk.Prefix))
				}
			case "key":
				var s string
				if !decodeTyped(ps, mp, m.Value, &s, `a string such as "keys/kurma.asc"`) {
					continue
				}
				if s == "" {
					ps.add(mp, "must name an armored OpenPGP public key file (relative paths are resolved against the config file's directory)")
					continue
				}
				if !filepath.IsAbs(s) {
					s = filepath.Join(baseDir, s)
				}
				tk.KeyFile = filepath.Clean(s)
			default:
				msg := `unknown key; a trusted key has only "prefix" and "key"`
				if s := suggest(m.Key, []string{"prefix", "key"}); s != "" {
					msg = fmt.Sprintf("unknown key; did you mean %q?", s)
				}
				ps.add(mp, msg)
			}
		}
		if !seen["prefix"] {
			ps.add(path+".prefix", `missing; write the image name prefix the key is trusted for, e.g. "example.com/kurma"`)
		}
		if !seen["key"] {
			ps.add(path+".key", `missing; write the path of an armored OpenPGP public key, e.g. "keys/kurma.asc"`)
		}
		out = append(out, tk)
	}
	return out
}
