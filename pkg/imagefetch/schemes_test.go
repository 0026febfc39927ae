package imagefetch

import (
	"context"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/imagefetch/imageref"
)

// TestEverySchemeFetched: the fetcher has a fetch for every scheme of
// imageref.Schemes, the one list the config check reads too: none is
// refused as unsupported (each fails here only for want of an image).
func TestEverySchemeFetched(t *testing.T) {
	f := newTestFetcher(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, s := range imageref.Schemes() {
		_, err := f.fetch(ctx, s.Name+":///nonexistent/kurma-test-image", request{})
		if err == nil || strings.Contains(err.Error(), "unsupported scheme") {
			t.Errorf("%s://: %v, want a fetch that fails for want of an image", s.Name, err)
		}
	}
	if _, err := f.fetch(ctx, "ftp://example.com/x.aci", request{}); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
		t.Errorf("ftp://: %v, want it unsupported", err)
	}
}
