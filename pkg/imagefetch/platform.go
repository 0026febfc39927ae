package imagefetch

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/appc/spec/schema/types"
	"github.com/containers/image/v5/manifest"
	imagetypes "github.com/containers/image/v5/types"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// hostPlatform is the platform this host runs images for: the OS and
// architecture kurma was built for, with the variant containers/image
// detects on a 64-bit ARM host ("v8": every arm64 CPU is ARMv8 or later).
// Other architectures get no variant, as containers/image gives them when
// the architecture is named explicitly.
func hostPlatform() v1.Platform {
	return platformFor(runtime.GOOS, runtime.GOARCH)
}

// platformFor is the platform kurma asks for on a host of goos/goarch.
func platformFor(goos, goarch string) v1.Platform {
	p := v1.Platform{OS: goos, Architecture: goarch}
	if goarch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// choice is containers/image's SystemContext part that says which image of
// an index to pull: the same values as chooseManifest uses, so that the
// pull and kurma's own check pick the same image.
func choice(p v1.Platform) *imagetypes.SystemContext {
	return &imagetypes.SystemContext{OSChoice: p.OS, ArchitectureChoice: p.Architecture, VariantChoice: p.Variant}
}

// appcPlatform is p as appc's os and arch labels spell it ("aarch64" for
// arm64); a platform appc has no name for keeps Go's names.
func appcPlatform(p v1.Platform) (os, arch string) {
	os, arch, err := types.ToAppcOSArch(p.OS, p.Architecture, "")
	if err != nil {
		return p.OS, p.Architecture
	}
	return os, arch
}

// PlatformError reports an image with nothing for this host's platform:
// an index (or manifest list) without an entry for it, or a single image
// built for another.
type PlatformError struct {
	Image   string   // the image, as named by the reference or its name
	Want    string   // this host's platform, "linux/arm64/v8"
	Offered []string // the platforms the image offers, sorted
}

func (e *PlatformError) Error() string {
	offered := "no platform"
	if len(e.Offered) > 0 {
		offered = strings.Join(e.Offered, ", ")
	}
	return fmt.Sprintf("image %s has no image for this host's platform %s (it offers %s)", e.Image, e.Want, offered)
}

// chooseManifest returns the digest of the entry of the index (or manifest
// list) raw, of media type mimeType, that a host of platform p runs: the
// first match in containers/image's order (the most specific variant p
// runs, then none), which is the one a pull with choice(p) copies. Without
// a match it returns a *PlatformError naming image and every platform the
// index offers.
func chooseManifest(raw []byte, mimeType string, p v1.Platform, image string) (string, error) {
	list, err := manifest.ListFromBlob(raw, manifest.NormalizedMIMEType(mimeType))
	if err != nil {
		return "", fmt.Errorf("image %s: index: %w", image, err)
	}
	d, err := list.ChooseInstance(choice(p))
	if err == nil {
		return d.String(), nil
	}
	var offered []string
	for _, i := range list.Instances() {
		u, err := list.Instance(i)
		if err != nil || u.ReadOnly.Platform == nil {
			continue
		}
		op := u.ReadOnly.Platform
		offered = append(offered, v1.Platform{OS: op.OS, Architecture: op.Architecture, Variant: op.Variant}.String())
	}
	slices.Sort(offered)
	return "", &PlatformError{Image: image, Want: p.String(), Offered: slices.Compact(offered)}
}

// checkPlatform refuses src, before any layer is copied, when it is an
// index (or manifest list) with nothing for this host's platform; the
// error names the platforms it offers. A single image's platform is
// checked from its config when it is unpacked (readImage).
func checkPlatform(ctx context.Context, src imagetypes.ImageReference, sys *imagetypes.SystemContext, image string) error {
	is, err := src.NewImageSource(ctx, sys)
	if err != nil {
		return err
	}
	defer is.Close()
	raw, mimeType, err := is.GetManifest(ctx, nil)
	if err != nil {
		return err
	}
	if !manifest.MIMETypeIsMultiImage(manifest.NormalizedMIMEType(mimeType)) {
		return nil
	}
	_, err = chooseManifest(raw, mimeType, hostPlatform(), image)
	return err
}

// checkConfigPlatform refuses a single image whose config names another OS
// or architecture than p; an image that names none is taken as p's. The
// variant is not compared, as container runtimes do not for a single
// image.
func checkConfigPlatform(cfg *v1.ConfigFile, p v1.Platform, image string) error {
	if (cfg.OS == "" || cfg.OS == p.OS) && (cfg.Architecture == "" || cfg.Architecture == p.Architecture) {
		return nil
	}
	have := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	return &PlatformError{Image: image, Want: p.String(), Offered: []string{have.String()}}
}

// checkACIPlatform refuses an ACI whose os or arch label names another
// platform than p (in appc's spelling); a label left out is taken as p's.
func checkACIPlatform(labels map[string]string, p v1.Platform, image string) error {
	os, arch := appcPlatform(p)
	if (labels["os"] == "" || labels["os"] == os) && (labels["arch"] == "" || labels["arch"] == arch) {
		return nil
	}
	return &PlatformError{Image: image, Want: os + "/" + arch, Offered: []string{labels["os"] + "/" + labels["arch"]}}
}
