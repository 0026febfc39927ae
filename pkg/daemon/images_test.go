package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/state"
)

// TestImageUsers: after the boot's fetches, the image two networks run
// from lists both as its users and cannot be removed (409, the store keeps
// it); an image no network uses can; a network whose image cannot be had
// gets a Spec carrying the error and uses nothing.
func TestImageUsers(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.aci")
	d := openedDaemon(t, testConfig(t, dir,
		loopbackNet(t, "b"), loopbackNet(t, "a"),
		network{Name: "c", ACI: "file://" + missing, Conf: map[string]any{"type": "loopback"}}))
	ctx := context.Background()

	specs := d.fetchAll(ctx)
	if len(specs) != 3 || specs[0].Name != "b" || specs[1].Name != "a" || specs[2].Name != "c" {
		t.Fatalf("specs = %+v, want b, a, c in config order", specs)
	}
	img := specs[0].Image
	if img == nil || specs[1].Image == nil || specs[1].Image.ID != img.ID || specs[0].Err != nil || specs[1].Err != nil {
		t.Fatalf("a and b: %+v", specs[:2])
	}
	if c := specs[2]; c.Image != nil || !errors.Is(c.Err, fs.ErrNotExist) || !strings.Contains(c.Err.Error(), "image file://"+missing) {
		t.Errorf("c = %+v, want no image and an error naming %s", c, missing)
	}
	if got := d.images.users(img.ID); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("users(%s) = %v, want [a b]", img.ID, got)
	}
	if got := d.images.of("a"); got != img.ID {
		t.Errorf("of(a) = %q, want %s", got, img.ID)
	}
	if got := d.images.of("c"); got != "" {
		t.Errorf("of(c) = %q, want none", got)
	}

	b := backend{d}
	imgs, err := b.Images(ctx)
	if err != nil || len(imgs) != 1 || imgs[0].ID != img.ID || !reflect.DeepEqual(imgs[0].InUse, []string{"a", "b"}) {
		t.Errorf("Images = %+v, %v; want %s in use by [a b]", imgs, err, img.ID)
	}
	err = b.RemoveImage(ctx, img.ID)
	wantAPIError(t, err, http.StatusConflict, api.CodeConflict, fmt.Sprintf("image %s is used by network(s) [a b]", img.ID))
	if _, err := d.fetcher.Get(img.ID); err != nil {
		t.Errorf("the refused image left the store: %v", err)
	}

	// The same image as an OCI layout has another ID, which no network uses.
	oci, err := b.PullImage(ctx, "file://"+testutil.BuiltImage(t, "cni-netplugin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if oci.ID == img.ID || len(oci.InUse) != 0 {
		t.Fatalf("pulled %+v: want another image, used by nothing", oci)
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

// TestRetiredNetworks: a network the config no longer names but journaled
// pods are attached to gets a Spec from its newest journaled snapshot:
// that image from the store and that config, and counts as the image's
// user; when the image is gone from the store, the Spec carries the error.
func TestRetiredNetworks(t *testing.T) {
	dir := t.TempDir()
	d := openedDaemon(t, testConfig(t, dir, loopbackNet(t, "kept")))
	img := fetch(t, d, netplugACI(t))
	gone := "sha512-" + strings.Repeat("0", 128)
	oldConf := []byte(`{"cniVersion":"1.0.0","name":"retired","type":"loopback","v":1}`)
	newConf := []byte(`{"cniVersion":"1.0.0","name":"retired","type":"loopback","v":2}`)
	lostConf := []byte(`{"cniVersion":"1.0.0","name":"lost","type":"loopback"}`)
	t0 := time.Now().UTC()
	journal(t, d.store,
		&state.Pod{ID: "p1", Created: t0, Phase: state.PhaseReady, Attachments: []state.Attachment{
			{Network: "kept", Config: []byte(`{}`), Image: img.ID, Phase: state.AttachDone},
			{Network: "retired", Config: oldConf, Image: img.ID, Phase: state.AttachDone},
		}},
		&state.Pod{ID: "p2", Created: t0.Add(time.Second), Phase: state.PhaseCreating, Attachments: []state.Attachment{
			{Network: "retired", Config: newConf, Image: img.ID, Phase: state.AttachDone},
			{Network: "lost", Config: lostConf, Image: gone, Phase: state.AttachIntent},
		}},
	)

	specs, err := d.retiredNetworks()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "retired" || specs[1].Name != "lost" {
		t.Fatalf("specs = %+v, want retired and lost (kept is in the config)", specs)
	}
	retired, lost := specs[0], specs[1]
	if retired.Err != nil || retired.Image == nil || retired.Image.ID != img.ID || retired.Image.Rootfs != img.Rootfs || string(retired.Config) != string(newConf) {
		t.Errorf("retired = %+v, want image %s and the newest snapshot %s", retired, img.ID, newConf)
	}
	if lost.Image != nil || string(lost.Config) != string(lostConf) || !errors.Is(lost.Err, imagefetch.ErrNotFound) ||
		!strings.Contains(lost.Err.Error(), "network removed from the config and its image "+gone+" is gone from the store") {
		t.Errorf("lost = %+v, want no image, its snapshot and an error naming %s", lost, gone)
	}
	if got := d.images.of("retired"); got != img.ID {
		t.Errorf("of(retired) = %q, want %s: podnet journals it with every del's attachment", got, img.ID)
	}
	if got := d.images.users(img.ID); !reflect.DeepEqual(got, []string{"retired"}) {
		t.Errorf("users = %v, want [retired]: its pods need the image to be torn down", got)
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
