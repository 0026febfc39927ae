package testutil

import "testing"

// TestSlug: anchors as GitHub makes them.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"A network (`pod_networks[i]`)":                "a-network-pod_networksi",
		"kurma's own image: `make image`":              "kurmas-own-image-make-image",
		"Interface names: `containerInterface`":        "interface-names-containerinterface",
		"Use kurmad from podman / containerd":          "use-kurmad-from-podman--containerd",
		"Measured (`make bench`, runtimes section)":    "measured-make-bench-runtimes-section",
		"check (version 2)":                            "check-version-2",
		"Podman, containerd, CRI-O: one name per each": "podman-containerd-cri-o-one-name-per-each",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
