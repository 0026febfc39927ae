package imagefetch

import (
	"time"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// Image is an unpacked, verified image in the store.
type Image struct {
	// ID is content-addressed: "sha512-<hex>" of the uncompressed tar for
	// ACIs, "sha256-<hex>" of the manifest for OCI/Docker images.
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	Version string            `json:"version,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Annotations are the ACI manifest's annotations, or for OCI/Docker
	// images the config's labels (the image's free-form metadata in both
	// formats). Images stored before this field existed have none until
	// fetched again.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Format is "aci" or "oci".
	Format string `json:"format"`
	// Rootfs is the absolute path of the unpacked root filesystem. It must
	// be treated as read-only by everyone but the store.
	Rootfs string `json:"rootfs"`
	App    App    `json:"app"`
	// Source is the URI or name it was last fetched by.
	Source  string    `json:"source"`
	Size    int64     `json:"size"`
	Fetched time.Time `json:"fetched"`
	// Verified says how the image was verified; nil for images stored
	// before kurma recorded it, which count as not verified.
	Verified *Verification `json:"verified,omitempty"`
	// Dependencies are the IDs of the ACIs laid under this one's rootfs,
	// in order.
	Dependencies []string `json:"dependencies,omitempty"`
}

// App is what to run from an image: an ACI's app or an OCI config's, as
// the plugin host runs it (gendef.App).
type App = gendef.App

// Runnable is img as a plugin container runs it (a generation's
// definition carries it): the store keeps the rest.
func (img *Image) Runnable() *gendef.Image {
	return &gendef.Image{ID: img.ID, Name: img.Name, Rootfs: img.Rootfs, Labels: img.Labels, Annotations: img.Annotations, App: img.App}
}
