package imagefetch

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// fetchOCIArchive imports an image of a local OCI archive, a tar of an OCI
// image layout: what `skopeo copy ... oci-archive:<path>[:<ref>]` and
// `podman save --format oci-archive` write. uri is
// oci-archive://<absolute path>[#<ref name>]: the archive's only image,
// or the one whose org.opencontainers.image.ref.name is the fragment. The
// archive is unpacked by the secure extractor and its image judged by the
// signature policy as a local layout's (transport "oci"). As with file://,
// an unchanged archive (size and mtime) is not read again.
func (f *Fetcher) fetchOCIArchive(ctx context.Context, uri string, u *url.URL, r request) (*Image, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("oci-archive URI with host %q: only local archives are supported", u.Host)
	}
	p, refName := u.Path, u.Fragment
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("oci-archive URI path %q is not absolute", p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory: name an OCI layout directory with file://%s", p, p)
	}
	if r.imageName != "" {
		return nil, fmt.Errorf("%w: a local OCI archive carries no image name to check against %q", ErrImageName, r.imageName)
	}
	if img, ok := f.storedFile(uri, fi, r); ok {
		return img, nil
	}
	if !isOCIArchive(p) {
		return nil, fmt.Errorf("%s is not an OCI archive (a tar with an oci-layout file, as skopeo's oci-archive: or podman save --format oci-archive write); an ACI or OCI layout directory is file://%s", p, p)
	}
	tmp, err := f.unpackedArchive(ctx, p)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// Named and versioned after the image's ref name: the one asked for,
	// else that of the archive's only image, if it has one.
	name, version := ociName(p), ""
	if ref := cmp.Or(refName, layoutRefName(tmp)); ref != "" {
		if n, v := refNameParts(ref); n != "" {
			name, version = n, v
		} else {
			version = v
		}
	}
	img, err := f.importOCILayoutAs(ctx, tmp, refName, name, version, uri, r)
	if err != nil {
		return nil, fmt.Errorf("OCI archive %s: %w", p, err)
	}
	return img, f.rememberFile(uri, img, fi)
}

// refNameParts splits a ref name into an image name and version:
// "kurma.dev/cni-netplugin:v1" → "kurma.dev/cni-netplugin", "v1"; a ref
// name without a tag ("v1", as skopeo writes one) is the version alone.
func refNameParts(ref string) (name, version string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		if !strings.Contains(ref, "/") {
			return "", ref
		}
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}
