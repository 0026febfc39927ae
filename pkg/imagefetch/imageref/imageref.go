// Package imageref is the grammar of the image references kurma takes: the
// one list of URI schemes an image may come from (Schemes), appc names,
// and the check a reference gets when a config is loaded (Resolve).
// pkg/netconfig asks it, pkg/imagefetch fetches what it lists. It imports
// nothing of kurma's, so a config's parser links no fetcher.
package imageref

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Scheme is one source of images: a URI scheme, what a reference of it
// looks like, and what kurma needs to know of it before fetching.
type Scheme struct {
	Name string // the URI scheme: "docker" for docker://...
	Form string // how a reference of it is written, for hints
	// Local: it names a path on this machine; a relative one
	// (scheme://relative/path) is resolved against the config file's
	// directory.
	Local bool
	// SelfNamed: the image's name is the one it gives itself (an ACI's
	// manifest, a local OCI index), not one the reference binds.
	SelfNamed bool
	// check says what is wrong with the reference s, whose part after
	// "scheme://" is rest, or returns ""; Resolve adds Hint to the message
	// when hint.
	check func(s, rest string) (msg string, hint bool)
}

// schemes are the URI schemes images come from: the one list the config
// check (Resolve) and the fetcher read (imagefetch has a fetch for each).
var schemes = []Scheme{
	{Name: "file", Form: "file:///abs/path.aci, file://relative/path.aci (relative to the config file)", Local: true, SelfNamed: true, check: checkPath},
	{Name: "http", Form: "http://...", SelfNamed: true, check: checkURL},
	{Name: "https", Form: "https://...", SelfNamed: true, check: checkURL},
	{Name: "docker", Form: "docker://registry/repo:tag", check: checkDocker},
	{Name: "oci-archive", Form: "oci-archive:///abs/path.tar[#ref name]", Local: true, SelfNamed: true, check: checkArchive},
}

// Schemes returns the URI schemes images come from, in order: a copy of
// the one list, so no reader can change what the others see.
func Schemes() []Scheme { return slices.Clone(schemes) }

// SchemeNames returns the names of Schemes, in order ("file", "http", ...).
func SchemeNames() []string {
	names := make([]string, len(schemes))
	for i, s := range schemes {
		names[i] = s.Name
	}
	return names
}

// Lookup returns the scheme named name (case-insensitive).
func Lookup(name string) (Scheme, bool) {
	i := slices.IndexFunc(schemes, func(s Scheme) bool { return strings.EqualFold(s.Name, name) })
	if i < 0 {
		return Scheme{}, false
	}
	return schemes[i], true
}

// Split returns the scheme of ref and what follows "scheme://"; false
// for a reference without "://" (an appc name).
func Split(ref string) (scheme, rest string, ok bool) {
	return strings.Cut(ref, "://")
}

// Hint says how references are written: every scheme's form, and appc
// names.
func Hint() string {
	forms := make([]string, len(schemes))
	for i, s := range schemes {
		forms[i] = s.Form
	}
	return "use " + strings.Join(forms, ", ") + ` or an appc name such as "example.com/kurma/cni-netplugin:v1"`
}

// Resolve checks an image reference and resolves a relative local path
// against baseDir. It returns the reference to fetch, or a message saying
// what is wrong and how to write it.
func Resolve(s, baseDir string) (string, string) {
	scheme, rest, hasScheme := Split(s)
	sc, known := Lookup(scheme)
	switch {
	case s == "":
		return "", "must not be empty; " + Hint()
	case strings.ContainsAny(s, " \t\r\n"):
		return "", fmt.Sprintf("%q contains whitespace; %s", s, Hint())
	case hasScheme && !known:
		return "", fmt.Sprintf("unsupported scheme %q in %q; %s", scheme, s, Hint())
	case hasScheme:
		if msg, hint := sc.check(s, rest); hint {
			return "", msg + "; " + Hint()
		} else if msg != "" {
			return "", msg
		}
		if !sc.Local {
			return s, ""
		}
		ref, p := resolvePath(sc, rest, baseDir)
		if p == "/" {
			return "", fmt.Sprintf("%q does not name a file; %s", s, Hint())
		}
		return ref, ""
	case missingSlashes(s) != "":
		return "", fmt.Sprintf("%q is missing the \"//\" after the scheme; %s", s, Hint())
	case looksLikePath(s):
		p := s
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		return "", fmt.Sprintf("%q has no scheme; did you mean %q? (a file needs file://; a name without a scheme is an appc name)", s, "file://"+filepath.Clean(p))
	}
	if msg := checkAppName(s); msg != "" {
		return "", fmt.Sprintf("%q is not an appc image name (%s); %s", s, msg, Hint())
	}
	return s, ""
}

// looksLikePath tells an image written as a file path without file://
// (an absolute or ./ path, or a name ending like an image file) from an
// appc name.
func looksLikePath(s string) bool {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~") {
		return true
	}
	for _, ext := range []string{".aci", ".tar", ".tar.gz", ".tgz", ".oci"} {
		if strings.HasSuffix(s, ext) {
			return true
		}
	}
	return false
}

// missingSlashes is the scheme ref starts with as "scheme:" without "//",
// "" when it does not.
func missingSlashes(ref string) string {
	for _, s := range schemes {
		if len(ref) > len(s.Name) && strings.EqualFold(ref[:len(s.Name)+1], s.Name+":") {
			return s.Name
		}
	}
	return ""
}

// MissingSlashes reports whether ref is written "scheme:..." for one of
// Schemes, without the "//".
func MissingSlashes(ref string) bool {
	return !strings.Contains(ref, "://") && missingSlashes(ref) != ""
}

// LocalPath splits rest, what follows "scheme://" in a local reference,
// into its path ("localhost/" dropped) and the fragment after '#'.
func LocalPath(rest string) (path, fragment string) {
	p, frag, _ := strings.Cut(rest, "#")
	if strings.HasPrefix(p, "localhost/") {
		p = strings.TrimPrefix(p, "localhost")
	}
	return p, frag
}

// resolvePath is the reference to a local path, resolved against baseDir
// when relative and cleaned, its fragment kept; and that path.
func resolvePath(sc Scheme, rest, baseDir string) (ref, path string) {
	p, frag := LocalPath(rest)
	if !filepath.IsAbs(p) {
		p = filepath.Join(baseDir, p)
	}
	p = filepath.Clean(p)
	ref = sc.Name + "://" + p
	if frag != "" {
		ref += "#" + frag
	}
	return ref, p
}

func checkPath(s, rest string) (string, bool) {
	if p, _ := LocalPath(rest); p == "" || strings.ContainsAny(rest, "?#") {
		return fmt.Sprintf("%q does not name a file", s), true
	}
	return "", false
}

func checkURL(s, rest string) (string, bool) {
	if u, err := url.Parse(s); err != nil || u.Host == "" {
		return fmt.Sprintf("%q is not a valid URL (it needs a host)", s), true
	}
	return "", false
}

func checkDocker(s, rest string) (string, bool) {
	if !dockerRefRE().MatchString(rest) || len(rest) > 255+128+80 {
		return fmt.Sprintf("%q is not a valid docker image reference; write it like docker://localhost:5000/kurma/cni-netplugin:v1 (lowercase repository, optional :tag and @sha256:digest)", s), false
	}
	return "", false
}

// checkArchive: a path, and optionally the image to take from the archive
// as #<its org.opencontainers.image.ref.name> (what skopeo's
// oci-archive:path:ref and podman save write there).
func checkArchive(s, rest string) (string, bool) {
	const hint = `write it like oci-archive:///var/lib/kurma/cni-netplugin.tar, or oci-archive:///path.tar#<ref name> to take one image of several (the org.opencontainers.image.ref.name skopeo and podman save write, e.g. "kurma.dev/cni-netplugin:v1")`
	p, frag := LocalPath(rest)
	switch {
	case p == "" || strings.Contains(rest, "?"):
		return fmt.Sprintf("%q does not name an archive; %s", s, hint), false
	case strings.Contains(rest, "#") && !ociRefRE().MatchString(frag):
		return fmt.Sprintf("%q: %q after # is not an image's ref name; %s", s, frag, hint), false
	}
	return "", false
}

// The grammars below are compiled on first use, not at start: this package
// is linked into every kurma binary, kurmactl's and the runc init's re-exec
// of kurmad included, where compiling them at start cost about 3 ms a run.

// ociRefRE is the OCI image layout's grammar of ref names
// (org.opencontainers.image.ref.name).
var ociRefRE = lazyRE(`^(?:[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*)(?:/(?:[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*))*$`)

// The grammar of github.com/distribution/reference:
// [domain[:port]/]path-component[/...][:tag][@digest].
const (
	refLabel     = `(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)`
	refDomain    = `(?:` + refLabel + `(?:\.` + refLabel + `)*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?`
	refComponent = `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
	refRepo      = `(?:` + refDomain + `/)?` + refComponent + `(?:/` + refComponent + `)*`
	refTag       = `[\w][\w.-]{0,127}`
	refDigest    = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
)

var (
	// dockerRefRE matches a whole reference.
	dockerRefRE = lazyRE(`^` + refRepo + `(?::` + refTag + `)?(?:@` + refDigest + `)?$`)
	// dockerRepoRE matches a repository: no tag, no digest.
	dockerRepoRE = lazyRE(`^` + refRepo + `$`)
)

// acIdentifierRE is appc's AC Identifier: image names and label names.
var acIdentifierRE = lazyRE(`^[a-z0-9]+(?:[-._~/][a-z0-9]+)*$`)

// lazyRE returns a regexp of expr, compiled at its first call.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// IsName reports whether s names an image: an appc name
// ("example.com/kurma/net") or a docker repository
// ("registry.example.com:5000/kurma/net", no tag or digest).
func IsName(s string) bool { return acIdentifierRE().MatchString(s) || dockerRepoRE().MatchString(s) }

// checkAppName validates an appc image name as used for discovery:
// "example.com/app[:version][,label=value...]". It says what is wrong, or
// returns "" when the name is valid.
func checkAppName(s string) string {
	parts := strings.Split(s, ",")
	name, version, hasVersion := strings.Cut(parts[0], ":")
	if !acIdentifierRE().MatchString(name) {
		return fmt.Sprintf("name %q must be lowercase letters and digits separated by one of - . _ ~ /", name)
	}
	if hasVersion && (version == "" || strings.ContainsAny(version, ":=")) {
		return fmt.Sprintf("version %q after ':' is not valid", version)
	}
	seen := map[string]bool{}
	if hasVersion {
		seen["version"] = true
	}
	for _, l := range parts[1:] {
		k, v, ok := strings.Cut(l, "=")
		switch {
		case !ok || v == "":
			return fmt.Sprintf("label %q must be written as name=value", l)
		case !acIdentifierRE().MatchString(k):
			return fmt.Sprintf("label name %q must be lowercase letters and digits", k)
		case k == "name":
			return `"name" is not a label`
		case seen[k]:
			return fmt.Sprintf("label %q is given twice", k)
		}
		seen[k] = true
	}
	return ""
}
