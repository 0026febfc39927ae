package gendef

import (
	"encoding/json"
	"fmt"
)

// Image is an image as a plugin container runs it: its ID in the image
// store, its unpacked root filesystem and what its manifest says. In JSON
// it is its ID alone: the journal names the image, the store keeps it.
type Image struct {
	// ID is the store's ("sha512-<hex>" for ACIs, "sha256-<hex>" for OCI
	// and Docker images).
	ID   string
	Name string
	// Rootfs is the absolute path of the unpacked root filesystem, to be
	// treated as read-only.
	Rootfs string
	// Labels are the image's labels (an ACI's, or an OCI config's).
	Labels map[string]string
	// Annotations are an ACI manifest's annotations, or an OCI config's
	// labels.
	Annotations map[string]string
	App         App
}

// App is what to run from an image: an ACI's app or an OCI config's.
type App struct {
	Exec       []string `json:"exec"`
	Env        []string `json:"env,omitempty"` // "KEY=value"
	User       string   `json:"user"`
	Group      string   `json:"group"`
	WorkingDir string   `json:"workingDir,omitempty"`
	// Capabilities are those the image asks for (an ACI's
	// os/linux/capabilities-retain-set isolator); the plugin host grants
	// them only with the network's consent.
	Capabilities []string `json:"capabilities,omitempty"`
}

// MarshalJSON writes img's ID.
func (img Image) MarshalJSON() ([]byte, error) { return json.Marshal(img.ID) }

// UnmarshalJSON reads an image ID: the rest is the store's to give.
func (img *Image) UnmarshalJSON(b []byte) error {
	var id string
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("image: want its ID, a string: %w", err)
	}
	*img = Image{ID: id}
	return nil
}

// Ref is the image the journal names by id (the store has the rest): nil
// for "", no image.
func Ref(id string) *Image {
	if id == "" {
		return nil
	}
	return &Image{ID: id}
}

// IDOf is img's ID, "" for nil.
func IDOf(img *Image) string {
	if img == nil {
		return ""
	}
	return img.ID
}
