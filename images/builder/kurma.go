package builder

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// kurma's own image: kurmad and its companions, with the cni-netplugin,
// flannel and netpol ACIs, as a Kubernetes node runs it (deploy/kubernetes). Written as an
// OCI image layout and as a docker-archive tarball, which `ctr images
// import` and `podman load` both take.
const (
	KurmaRepository = "kurma.dev/kurma" // the image's name; tags: the version, KurmaReleaseTag and KurmaStableTag
	// KurmaReleaseTag is the release every build of this tree belongs to:
	// the versioned reference deploy/kubernetes' manifests name (never
	// :latest), bumped with each release.
	KurmaReleaseTag = "0.1.0"
	// KurmaStableTag is the last tag of every build: whatever build was
	// imported last, for trying things out by hand.
	KurmaStableTag = "latest"
	KurmaOCIDir    = "kurma"     // OCI image layout in KurmaOptions.OutDir
	KurmaArchive   = "kurma.tar" // docker-archive in KurmaOptions.OutDir
	KurmaBinDir    = "kurma-bin" // default binaries directory in KurmaOptions.OutDir

	// Paths inside the image.
	KurmaPrefix    = "/opt/kurma"
	KurmaBin       = KurmaPrefix + "/bin"
	KurmaImages    = KurmaPrefix + "/images"
	KurmaEntryName = "kurma-node"
)

// kurmaHostTools are the host's programs kurma's image carries, with their
// libraries: kurmad runs them.
var kurmaHostTools = []string{"mkfs.ext4"}

// kurmaBinaries are the programs in KurmaBin and their packages. kurmad
// and kurma-init are cgo (libcontainer's nsenter) and linked statically
// against glibc; the others are pure Go.
var kurmaBinaries = map[string]string{
	"kurmad":      "./cmd/kurmad",
	"kurma-agent": "./cmd/kurma-agent",
	"kurma-init":  "./cmd/kurma-init",
	"kurmactl":    "./cmd/kurmactl",
	"kurma-cni":   "./cmd/kurma-cni",
	"kurma-node":  "./cmd/kurma-node",
}

// cgoBinaries are the kurmaBinaries built with cgo.
var cgoBinaries = map[string]bool{"kurmad": true, "kurma-init": true}

// caBundle is copied into the image when the build host has it, so that
// kurmad can fetch https:// and docker:// plugin images.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// KurmaOptions says where BuildKurma reads and writes.
type KurmaOptions struct {
	OutDir string // receives KurmaOCIDir and KurmaArchive (required)
	// Version tags the image (with KurmaReleaseTag and KurmaStableTag) and is compiled into
	// the binaries; `git describe` in the Makefile. Default "dev".
	Version string
	// PluginACI is the cni-netplugin ACI shipped at
	// /opt/kurma/images/cni-netplugin.aci. Default OutDir/cni-netplugin.aci
	// (what Build writes).
	PluginACI string
	// FlannelACI is the flannel image shipped at
	// /opt/kurma/images/flannel.aci. Default OutDir/flannel.aci (what
	// Build writes with Options.Flanneld).
	FlannelACI string
	// NetpolACI is the netpol image shipped at
	// /opt/kurma/images/netpol.aci. Default OutDir/netpol.aci (what Build
	// writes with Options.Netpol).
	NetpolACI string
	// BinDir receives the compiled binaries; default OutDir/kurma-bin.
	BinDir string
	// SkipCompile uses the binaries already in BinDir.
	SkipCompile bool
	// ModuleDir is where `go build` runs; default the current directory.
	ModuleDir string
	// Arch is the architecture (GOARCH) of the image; "" or the build
	// host's. Another is refused: kurmad is cgo (libcontainer's nsenter,
	// linked against the host's libc.a) and the image carries the host's
	// mkfs.ext4, so kurma's image for arm64 is built on an arm64 host.
	Arch string
	Log  func(format string, args ...any)
}

// KurmaResult describes what BuildKurma wrote.
type KurmaResult struct {
	OCIDir   string   // OutDir/kurma
	Archive  string   // OutDir/kurma.tar
	Digest   string   // "sha256:<hex>" of the image manifest
	Names    []string // kurma.dev/kurma:<version>, kurma.dev/kurma:latest
	Libs     []string // shared libraries carried for binaries that are not static
	BinDir   string
	RootSize int64 // bytes of the files in the image
}

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// BuildKurma compiles kurma's binaries (unless SkipCompile) and writes
// kurma's image.
func BuildKurma(ctx context.Context, opts KurmaOptions) (*KurmaResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if !opts.SkipCompile {
		start := time.Now()
		if err := CompileKurma(ctx, opts.ModuleDir, opts.BinDir, opts.Version); err != nil {
			return nil, err
		}
		opts.Log("compiled %d kurma binaries into %s in %s", len(kurmaBinaries), opts.BinDir, time.Since(start).Round(time.Millisecond))
	}
	files, libs, err := kurmaRootfs(opts.BinDir, opts.PluginACI, opts.FlannelACI, opts.NetpolACI)
	if err != nil {
		return nil, err
	}
	img, err := kurmaImage(files, opts.Version)
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	res := &KurmaResult{
		OCIDir: filepath.Join(opts.OutDir, KurmaOCIDir), Archive: filepath.Join(opts.OutDir, KurmaArchive),
		Digest: digest.String(), Libs: libs, BinDir: opts.BinDir, RootSize: rootSize(files),
	}
	if err := writeKurma(res, img, kurmaTags(opts.Version)); err != nil {
		return nil, err
	}
	opts.Log("wrote %s and %s: %s (manifest %s)", res.OCIDir, res.Archive, strings.Join(res.Names, ", "), res.Digest)
	return res, nil
}

// withDefaults checks opts and fills in what was left out: the version
// "dev", the binaries and the plugin images under OutDir, a Log that
// drops its lines.
func (opts KurmaOptions) withDefaults() (KurmaOptions, error) {
	if opts.OutDir == "" {
		return opts, errors.New("builder: OutDir is required")
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Arch != "" && opts.Arch != runtime.GOARCH {
		return opts, fmt.Errorf("builder: kurma's image for %s: built on an %s host only (kurmad is cgo and the image carries the host's %s); this host is %s",
			opts.Arch, opts.Arch, strings.Join(kurmaHostTools, ", "), runtime.GOARCH)
	}
	if !tagRE.MatchString(opts.Version) {
		return opts, fmt.Errorf("builder: version %q is not a valid image tag", opts.Version)
	}
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(opts.OutDir, KurmaBinDir)
	}
	if opts.PluginACI == "" {
		opts.PluginACI = filepath.Join(opts.OutDir, ACIFile)
	}
	if opts.FlannelACI == "" {
		opts.FlannelACI = filepath.Join(opts.OutDir, FlannelACIFile)
	}
	if opts.NetpolACI == "" {
		opts.NetpolACI = filepath.Join(opts.OutDir, NetpolACIFile)
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	return opts, nil
}

// rootSize is the bytes of the regular files of a rootfs.
func rootSize(files []entry) int64 {
	var n int64
	for _, f := range files {
		if f.typ == tar.TypeReg {
			if fi, err := os.Stat(f.src); err == nil && f.data == nil {
				n += fi.Size()
			}
			n += int64(len(f.data))
		}
	}
	return n
}

// kurmaTags are the tags of kurma's image at version: it, the release tag
// and the stable one, each once.
func kurmaTags(version string) []string {
	tags := []string{version}
	for _, t := range []string{KurmaReleaseTag, KurmaStableTag} {
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	return tags
}

// writeKurma writes img under tags as res says: an OCI layout at
// res.OCIDir and an archive at res.Archive; it notes each name in
// res.Names.
func writeKurma(res *KurmaResult, img v1.Image, tags []string) error {
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		tag, err := name.NewTag(KurmaRepository + ":" + t)
		if err != nil {
			return err
		}
		refs[tag] = img
		res.Names = append(res.Names, tag.String())
	}
	if err := writeLayout(res.OCIDir, img, tags); err != nil {
		return fmt.Errorf("builder: writing %s: %w", res.OCIDir, err)
	}
	if err := writeArchive(res.Archive, refs); err != nil {
		return fmt.Errorf("builder: writing %s: %w", res.Archive, err)
	}
	return nil
}

// CompileKurma builds kurmaBinaries for the build host's architecture into
// dir: kurmad and kurma-init with cgo, linked statically (glibc's libc.a,
// the netgo and osusergo tags so that nothing needs NSS at run time), the
// rest with CGO_ENABLED=0.
func CompileKurma(ctx context.Context, moduleDir, dir, version string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("builder: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("builder: %w", err)
	}
	ldflags := "-s -w -X main.version=" + version
	var pure []string
	for _, n := range sortedKeys(kurmaBinaries) {
		if !cgoBinaries[n] {
			pure = append(pure, kurmaBinaries[n])
		}
	}
	builds := []struct {
		env  []string
		args []string
	}{
		{[]string{"CGO_ENABLED=1"}, []string{"-tags", "containers_image_openpgp,netgo,osusergo",
			"-ldflags", ldflags + " -linkmode external -extldflags -static", "-o", filepath.Join(abs, "kurmad"), kurmaBinaries["kurmad"]}},
		{[]string{"CGO_ENABLED=1"}, []string{"-tags", "netgo,osusergo",
			"-ldflags", ldflags + " -linkmode external -extldflags -static", "-o", filepath.Join(abs, "kurma-init"), kurmaBinaries["kurma-init"]}},
		{[]string{"CGO_ENABLED=0"}, append([]string{"-tags", "containers_image_openpgp", "-ldflags", ldflags, "-o", abs + string(filepath.Separator)}, pure...)},
	}
	for _, b := range builds {
		args := append([]string{"build", "-trimpath", "-buildvcs=false"}, b.args...)
		cmd := exec.CommandContext(ctx, goCommand(), args...)
		cmd.Dir = moduleDir
		cmd.Env = append(append(os.Environ(), "GOOS="+OS, "GOARCH="+runtime.GOARCH), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("builder: go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// kurmaRootfs lists the image's files; libs are the shared libraries
// carried for binaries that are not static (none when kurmad linked
// statically).
func kurmaRootfs(binDir, pluginACI, flannelACI, netpolACI string) ([]entry, []string, error) {
	var es []entry
	dir := func(p string, mode int64) { es = append(es, entry{path: p, mode: mode, typ: tar.TypeDir}) }
	for _, d := range []string{"dev", "etc", "etc/kurma", "opt", "opt/kurma", "opt/kurma/bin", "opt/kurma/images",
		"proc", "run", "sys", "var", "var/lib", "var/lib/kurma"} {
		dir(d, 0o755)
	}
	dir("tmp", 0o1777)
	// A runtime may name a netns /var/run/netns/...: it must resolve in
	// kurmad's container as on the host.
	es = append(es,
		entry{path: "var/run", mode: 0o777, typ: tar.TypeSymlink, link: "../run"},
		entry{path: "etc/passwd", mode: 0o644, typ: tar.TypeReg, data: []byte(passwd)},
		entry{path: "etc/group", mode: 0o644, typ: tar.TypeReg, data: []byte(group)},
	)
	if _, err := os.Stat(caBundle); err == nil {
		es = append(es, entry{path: strings.TrimPrefix(caBundle, "/"), mode: 0o644, typ: tar.TypeReg, src: caBundle})
	}
	var bins []string
	for _, n := range sortedKeys(kurmaBinaries) {
		src := filepath.Join(binDir, n)
		if err := checkExecutable(src, runtime.GOARCH); err != nil {
			return nil, nil, err
		}
		bins = append(bins, src)
		es = append(es, entry{path: path.Join(KurmaBin[1:], n), mode: 0o755, typ: tar.TypeReg, src: src})
	}
	for _, aci := range []struct{ src, dst, what string }{
		{pluginACI, path.Join(KurmaImages, ACIFile), "the cni-netplugin ACI (make images)"},
		{flannelACI, flannelInKurma, "the flannel ACI (make images, which runs make flanneld)"},
		{netpolACI, netpolInKurma, "the netpol ACI (make images, which runs make netpol)"},
	} {
		if err := checkRegular(aci.src); err != nil {
			return nil, nil, fmt.Errorf("builder: %s: %w", aci.what, err)
		}
		mtime, err := contentTime(aci.src)
		if err != nil {
			return nil, nil, err
		}
		es = append(es, entry{path: aci.dst[1:], mode: 0o644, typ: tar.TypeReg, src: aci.src, mtime: mtime})
	}
	libs, err := sharedLibs(bins)
	if err != nil {
		return nil, nil, err
	}
	var libPaths []string
	for _, l := range libs {
		libPaths = append(libPaths, "/"+l.path)
	}
	// mkfs.ext4: kurmad makes each network's state dir a filesystem of its
	// own (docs/security.md, "Bounds").
	tools, err := hostTools(kurmaHostTools)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range tools {
		if !slices.ContainsFunc(es, func(o entry) bool { return o.path == e.path }) &&
			!slices.ContainsFunc(libs, func(o entry) bool { return o.path == e.path }) {
			es = append(es, e)
		}
	}
	es = withParents(append(es, libs...))
	sort.Slice(es, func(i, j int) bool { return es[i].path < es[j].path })
	return es, libPaths, nil
}

// sharedLibs are entries for the ELF interpreter and libraries of every
// binary that is not static, from the build host, at the same paths.
func sharedLibs(bins []string) ([]entry, error) {
	seen := map[string]bool{}
	var queue []string
	for _, b := range bins {
		deps, err := elfDeps(b)
		if err != nil {
			return nil, fmt.Errorf("builder: %s: %w", b, err)
		}
		queue = append(queue, deps...)
	}
	var es []entry
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(real)
		if err != nil {
			return nil, err
		}
		es = append(es, entry{path: strings.TrimPrefix(p, "/"), mode: int64(fi.Mode().Perm()), typ: tar.TypeReg, src: real})
		deps, err := elfDeps(real)
		if err != nil {
			return nil, fmt.Errorf("builder: %s: %w", p, err)
		}
		queue = append(queue, deps...)
	}
	return es, nil
}

// kurmaImage is the one-layer image of files: entrypoint kurma-node run,
// root, PATH with kurma's binaries first.
func kurmaImage(files []entry, version string) (v1.Image, error) {
	return oneLayerImage(files, runtime.GOARCH, "kurma images/build -kurma", KurmaRepository+":"+version, func(cf *v1.ConfigFile) {
		cf.Config.Entrypoint = []string{path.Join(KurmaBin, KurmaEntryName)}
		cf.Config.Cmd = []string{"run"}
		cf.Config.Env = []string{"PATH=" + KurmaBin + ":/usr/sbin:/usr/bin:/sbin:/bin"}
		cf.Config.Labels = map[string]string{
			labelTitle:          "kurma",
			labelVersion:        version,
			"dev.kurma.plugins": path.Join(KurmaImages, ACIFile),
			"dev.kurma.flannel": flannelInKurma,
			"dev.kurma.netpol":  netpolInKurma,
		}
	})
}

// writeLayout writes img as the OCI layout at dir (replacing it), one
// index entry per tag, each annotated with its tag (ref name, for skopeo
// and podman: oci:DIR:TAG) and its full name (for containerd's import).
func writeLayout(dir string, img v1.Image, tags []string) error {
	var ann []map[string]string
	for _, t := range tags {
		ann = append(ann, map[string]string{annotationRefName: t, "io.containerd.image.name": KurmaRepository + ":" + t})
	}
	return replaceLayoutTagged(dir, img, ann)
}

// writeArchive writes refs as a docker-archive tarball (manifest.json with
// every tag of the image), through a temp file renamed into place.
func writeArchive(dst string, refs map[name.Reference]v1.Image) error {
	tmp := dst + ".new"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// contentTime is a modification time that changes with the file's
// content and with nothing else: kurmad takes a file:// image it has
// stored as unchanged while its size and mtime are (package imagefetch),
// so a new image whose ACI had the fixed epoch of every other file, and
// by chance the old one's size, would keep the old plugins.
func contentTime(p string) (time.Time, error) {
	f, err := os.Open(p)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return time.Time{}, err
	}
	sum := h.Sum(nil)
	return epoch.Add(time.Duration(binary.BigEndian.Uint32(sum)%(365*24*3600)) * time.Second), nil
}

func checkRegular(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
