package imagefetch

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// An ACI's os/linux/capabilities-retain-set isolator is the image's request
// for capabilities: it shows in App.Capabilities (networkpod grants them
// only with the network's consent); an image without one asks for none.
func TestACICapabilitiesRetainSet(t *testing.T) {
	manifest := strings.Replace(testManifest, `"app":{`,
		`"app":{"isolators":[{"name":"os/linux/capabilities-retain-set","value":{"set":["CAP_BPF","CAP_SYS_MODULE"]}}],`, 1)
	f := newTestFetcher(t, Options{})
	src := t.TempDir()
	for name, tt := range map[string]struct {
		manifest string
		want     []string
	}{
		"with":    {manifest, []string{"CAP_BPF", "CAP_SYS_MODULE"}},
		"without": {testManifest, nil},
	} {
		p := writeFile(t, src, name+".aci", compress(t, tarBytes(t, aciEntries(tt.manifest, testRootfs)), "gzip"))
		img, err := f.Fetch(context.Background(), "file://"+p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(img.App.Capabilities, tt.want) {
			t.Errorf("%s: capabilities %v, want %v", name, img.App.Capabilities, tt.want)
		}
	}
}
