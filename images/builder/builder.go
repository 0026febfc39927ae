// Package builder makes kurma's own plugin image, cni-netplugin, without
// Docker: it compiles the cni-wrapper and the CNI reference plugins as static
// binaries and writes the same rootfs as an appc ACI and as an OCI image
// layout. The output is reproducible: the same sources and Go toolchain give
// byte-identical files (same ACI image ID, same OCI manifest digest).
//
// Image contract (see docs/plugin-contract.md): the wrapper is installed as
// /opt/network/{add,check,del,gc,setup,status}, setup being the main executable; the
// plugins are in /opt/cni/bin; /var/lib/cni holds host-local's leases and the
// libcni cache.
package builder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kurma-project/kurma/pkg/cniwrap"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Image identity.
const (
	Name       = "kurma.dev/cni-netplugin" // appc name; OCI title "cni-netplugin"
	Version    = "v1"                      // appc "version" label, OCI tag and ref name
	OS         = "linux"
	Entrypoint = netplugin.Dir + "/setup"

	ACIFile = "cni-netplugin.aci" // written in Options.OutDir
	OCIDir  = "cni-netplugin"     // OCI image layout directory in Options.OutDir
	BinDir  = "bin"               // default binaries directory in Options.OutDir

	WrapperPackage = "github.com/kurma-project/kurma/plugins/cni-wrapper"
	WrapperBinary  = "cni-wrapper"
	pluginsModule  = "github.com/containernetworking/plugins"

	// PluginsVersion is the containernetworking/plugins version pinned in
	// go.mod (a test checks they agree); it is recorded in the images.
	PluginsVersion = "v1.9.1"
)

// Paths inside the rootfs.
const (
	NetworkDir = netplugin.Dir
	CNIBinDir  = "/opt/cni/bin"
	CNIDataDir = "/var/lib/cni"
)

// WrapperNames returns the names the wrapper is installed under in
// NetworkDir: every verb it has.
func WrapperNames() []string { return cniwrap.Verbs() }

// plugins maps each CNI reference plugin shipped in the image to its Go
// package (the module version is the one pinned in go.mod).
var plugins = map[string]string{
	"bridge":     pluginsModule + "/plugins/main/bridge",
	"host-local": pluginsModule + "/plugins/ipam/host-local",
	"loopback":   pluginsModule + "/plugins/main/loopback",
	"ptp":        pluginsModule + "/plugins/main/ptp",
	"macvlan":    pluginsModule + "/plugins/main/macvlan",
	"ipvlan":     pluginsModule + "/plugins/main/ipvlan",
	"portmap":    pluginsModule + "/plugins/meta/portmap",
	"firewall":   pluginsModule + "/plugins/meta/firewall",
	"tuning":     pluginsModule + "/plugins/meta/tuning",
	"bandwidth":  pluginsModule + "/plugins/meta/bandwidth",
	"static":     pluginsModule + "/plugins/ipam/static",
}

// epoch is the modification time of every file in the images, so that two
// builds are identical.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Options says where the builder reads and writes.
type Options struct {
	OutDir string // receives ACIFile and OCIDir (required)
	// BinDir holds the compiled binaries (WrapperBinary and one file per
	// plugins key). Default: OutDir/bin.
	BinDir string
	// SkipCompile uses the binaries already in BinDir instead of running
	// `go build` (tests compile once and build images twice).
	SkipCompile bool
	// ModuleDir is the kurma module's directory `go build` runs in; default
	// the current directory (any directory inside the module works).
	ModuleDir string
	// HostTools names host programs (looked up in PATH) copied into the
	// image with their shared libraries, e.g. "nft" so that bridge's ipMasq
	// and portmap work through nftables. Such an image is reproducible only
	// on hosts with the same packages.
	HostTools []string
	// Flanneld, when set, is the flanneld binary (`make flanneld`) of the
	// flannel image written beside cni-netplugin (flannel.go).
	Flanneld string
	// Netpol, when set, is the kurma-netpol binary (`make netpol`) of the
	// netpol image written beside cni-netplugin (netpol.go).
	Netpol string
	// Arch is the architecture (GOARCH) of the images and their binaries:
	// one of Archs(); default the build host's. For another than the
	// host's the binaries are cross-compiled (all are pure Go), HostTools
	// must be empty (they are the host's programs), and Flanneld and
	// Netpol must be built for Arch.
	Arch string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Result describes what Build wrote.
type Result struct {
	ACIPath    string // OutDir/cni-netplugin.aci
	ACIImageID string // "sha512-<hex>" of the uncompressed ACI tar (appc image ID)
	OCIDir     string // OutDir/cni-netplugin (OCI image layout)
	OCIDigest  string // "sha256:<hex>" of the image manifest
	BinDir     string
	Arch       string // GOARCH the images are for
	// Flannel is the flannel image, when Options.Flanneld was set.
	Flannel *ImageResult
	// Netpol is the netpol image, when Options.Netpol was set.
	Netpol *ImageResult
}

// ImageResult is one more plugin image Build wrote.
type ImageResult struct {
	ACIPath, ACIImageID string
	OCIDir, OCIDigest   string
}

// Build compiles the binaries (unless opts.SkipCompile) and writes both images.
func Build(ctx context.Context, opts Options) (*Result, error) {
	if opts.OutDir == "" {
		return nil, errors.New("builder: OutDir is required")
	}
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(opts.OutDir, BinDir)
	}
	arch, err := imageArch(opts.Arch)
	if err != nil {
		return nil, err
	}
	if arch != runtime.GOARCH && len(opts.HostTools) > 0 {
		return nil, fmt.Errorf("builder: host tools %v are this %s host's programs; an %s image cannot carry them", opts.HostTools, runtime.GOARCH, arch)
	}
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if !opts.SkipCompile {
		start := time.Now()
		if err := Compile(ctx, opts.ModuleDir, opts.BinDir, arch); err != nil {
			return nil, err
		}
		logf("compiled the wrapper and %d CNI plugins for %s into %s in %s", len(plugins), arch, opts.BinDir, time.Since(start).Round(time.Millisecond))
	}
	fs, err := rootfs(opts.BinDir, opts.HostTools, arch)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("builder: %w", err)
	}
	res := &Result{
		ACIPath: filepath.Join(opts.OutDir, ACIFile),
		OCIDir:  filepath.Join(opts.OutDir, OCIDir),
		BinDir:  opts.BinDir,
		Arch:    arch,
	}
	if res.ACIImageID, err = cniNetplugin.writeACI(res.ACIPath, fs, arch); err != nil {
		return nil, fmt.Errorf("builder: writing %s: %w", res.ACIPath, err)
	}
	logf("wrote %s (image ID %s)", res.ACIPath, res.ACIImageID)
	if res.OCIDigest, err = cniNetplugin.writeOCI(res.OCIDir, fs, arch); err != nil {
		return nil, fmt.Errorf("builder: writing %s: %w", res.OCIDir, err)
	}
	logf("wrote %s (manifest %s)", res.OCIDir, res.OCIDigest)
	if opts.Flanneld != "" {
		if res.Flannel, err = buildFlannel(opts.OutDir, fs, opts.Flanneld, arch); err != nil {
			return nil, err
		}
		logf("wrote %s (image ID %s) and %s (manifest %s)", res.Flannel.ACIPath, res.Flannel.ACIImageID, res.Flannel.OCIDir, res.Flannel.OCIDigest)
	}
	if opts.Netpol != "" {
		if res.Netpol, err = buildNetpol(opts.OutDir, opts.Netpol, arch); err != nil {
			return nil, err
		}
		logf("wrote %s (image ID %s) and %s (manifest %s)", res.Netpol.ACIPath, res.Netpol.ACIImageID, res.Netpol.OCIDir, res.Netpol.OCIDigest)
	}
	return res, nil
}

// Compile builds the wrapper and every plugin in plugins as static binaries
// (CGO_ENABLED=0, -trimpath, no VCS stamp) for linux/arch ("" = the build
// host's architecture) into dir with a single `go build`. moduleDir is
// where go runs ("" = current directory).
func Compile(ctx context.Context, moduleDir, dir, arch string) error {
	arch, err := imageArch(arch)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("builder: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("builder: %w", err)
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", abs + string(filepath.Separator), WrapperPackage}
	for _, name := range PluginNames() {
		args = append(args, plugins[name])
	}
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+OS, "GOARCH="+arch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("builder: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// goCommand is the go tool to build with: the one on PATH, else the one in
// GOROOT.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	for _, root := range []string{os.Getenv("GOROOT"), "/usr/local/go"} {
		if p := filepath.Join(root, "bin", "go"); root != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return "go"
}
