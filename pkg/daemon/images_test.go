package daemon

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/state"
)

// TestImageRemoval: an image no network uses can be removed, once (then
// 404, the store's ErrNotFound its cause); a pull that fails is 502 with
// its cause. (An image a network runs from cannot: TestBoot.)
func TestImageRemoval(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.aci")
	d := openedDaemon(t, testConfig(t, dir, loopbackNet(t, "a")))
	ctx := context.Background()
	b := backend{d}
	oci, err := b.PullImage(ctx, "file://"+testutil.BuiltImage(t, "cni-netplugin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(oci.InUse) != 0 {
		t.Fatalf("pulled %+v: want it used by nothing", oci)
	}
	if imgs, err := b.Images(ctx); err != nil || len(imgs) != 1 || imgs[0].ID != oci.ID {
		t.Errorf("Images = %+v, %v; want %s", imgs, err, oci.ID)
	}
	if err := b.RemoveImage(ctx, oci.ID); err != nil {
		t.Fatalf("RemoveImage of an unused image: %v", err)
	}
	if _, err := d.fetcher.Get(oci.ID); !errors.Is(err, imagefetch.ErrNotFound) {
		t.Errorf("removed image still in the store: %v", err)
	}
	err = b.RemoveImage(ctx, oci.ID)
	wantAPIError(t, err, http.StatusNotFound, api.CodeNotFound, oci.ID)
	if !errors.Is(err, imagefetch.ErrNotFound) {
		t.Errorf("RemoveImage of a removed image = %v, want imagefetch.ErrNotFound as its cause", err)
	}
	_, err = b.PullImage(ctx, "file://"+missing, nil)
	wantAPIError(t, err, http.StatusBadGateway, api.CodePullFailed, "image file://"+missing)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed pull = %v, want its cause kept", err)
	}
}

// journal writes pods into the journal as a previous kurmad left them.
func journal(t testing.TB, s *state.Store, pods ...*state.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := s.PutPod(p); err != nil {
			t.Fatal(err)
		}
	}
}

// wantAPIError checks that err is an *api.Error with that status and code
// and a message containing msg.
func wantAPIError(t testing.TB, err error, status int, code, msg string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want an *api.Error %d %s", err, err, status, code)
	}
	if ae.Status != status || ae.Code != code || !strings.Contains(ae.Message, msg) {
		t.Errorf("err = %d %s %q, want %d %s mentioning %q", ae.Status, ae.Code, ae.Message, status, code, msg)
	}
}
