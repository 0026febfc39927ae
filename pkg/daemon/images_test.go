package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/state"
)

// TestImageUsers: the image generations run from lists their networks as
// its users and cannot be removed (409, the store keeps it); an image no
// network uses can.
func TestImageUsers(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.aci")
	d := openedDaemon(t, testConfig(t, dir,
		loopbackNet(t, "b"), loopbackNet(t, "a"),
		network{Name: "c", Image: "file://" + missing, Conf: map[string]any{"type": "loopback"}}))
	ctx := context.Background()
	gens, err := d.planBoot()
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 3 || gens[0].key.Network != "b" || gens[1].key.Network != "a" || gens[2].key.Network != "c" {
		t.Fatalf("generations = %+v, want b, a, c in config order", gens)
	}
	img := fetch(t, d, netplugACI(t))
	gens[0].image, gens[1].image = img, img // as fetched does
	if got := d.imageUsers(img.ID); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("users(%s) = %v, want [a b]", img.ID, got)
	}
	if got := d.imageOf("a"); got != img.ID {
		t.Errorf("imageOf(a) = %q, want %s", got, img.ID)
	}
	if got := d.imageOf("c"); got != "" {
		t.Errorf("imageOf(c) = %q, want none", got)
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

// TestPlanBoot: a config entry whose definition is journaled gets that
// generation again; a changed one a new generation, and the old one, which
// pods still use, retires, run from its record; a network gone from the
// config is run, retiring, from its record (image, config, capabilities)
// for its pods; attachments of a kurmad without generations from their
// newest snapshot, failing when that image is gone; records nothing uses go.
func TestPlanBoot(t *testing.T) {
	dir := t.TempDir()
	changedNet := loopbackNet(t, "changed")
	changedNet.Conf["v"] = 2
	d := openedDaemon(t, testConfig(t, dir, loopbackNet(t, "kept"), changedNet))
	img := fetch(t, d, netplugACI(t))
	gone := "sha512-" + strings.Repeat("0", 128)
	kept, _ := d.cfg.Network("kept")
	retiredConf := []byte(`{"name":"retired","type":"loopback"}`)
	for _, g := range []*state.Generation{
		{Network: "kept", Generation: 3, Definition: definitionOf(kept), Image: img.ID, Config: []byte(`{}`)},
		{Network: "changed", Generation: 1, Definition: "old", Image: img.ID, Config: []byte(`{"v":1}`)},
		{Network: "retired", Generation: 2, Definition: "r", Image: img.ID, Config: retiredConf, AllowCapabilities: []string{"CAP_BPF"}, AllowSyscalls: []string{"keyctl"}},
		{Network: "orphan", Generation: 5, Definition: "o", Image: img.ID},
	} {
		if err := d.store.PutGeneration(g); err != nil {
			t.Fatal(err)
		}
	}
	lostConf := []byte(`{"name":"lost","type":"loopback"}`)
	t0 := time.Now().UTC()
	journal(t, d.store,
		&state.Pod{ID: "p1", Created: t0, Phase: state.PhaseReady, Attachments: []state.Attachment{
			{Network: "kept", Generation: 3, Image: img.ID, Phase: state.AttachDone},
			{Network: "changed", Generation: 1, Image: img.ID, Phase: state.AttachDone},
			{Network: "retired", Generation: 2, Config: []byte(`{"per":"pod"}`), Image: img.ID, Phase: state.AttachDone},
			{Network: "lost", Config: lostConf, Image: gone, Phase: state.AttachIntent},
		}},
	)
	gens, err := d.planBoot()
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]*generation{}
	for _, g := range gens {
		byKey[g.key.String()] = g
	}
	want := []string{"kept generation 3", "changed generation 2", "changed generation 1", "retired generation 2", "lost generation 0"}
	if len(gens) != len(want) {
		t.Fatalf("generations %v, want %v", keys(gens), want)
	}
	for _, k := range want {
		if byKey[k] == nil {
			t.Fatalf("generations %v, want %v", keys(gens), want)
		}
	}
	if g := byKey["kept generation 3"]; g.retiring || g.entry == nil || g.storedImage != img.ID || !g.attached || g.image != nil {
		t.Errorf("kept = %+v, want its journaled generation again, to be fetched, knowing the image its pods had", g)
	}
	if g := byKey["changed generation 2"]; g.retiring || g.entry == nil || d.nets["changed"].serving != g {
		t.Errorf("changed 2 = %+v, want a new generation serving the changed entry", g)
	}
	if g := byKey["changed generation 1"]; !g.retiring || g.image == nil || g.image.ID != img.ID || string(g.spec.Config) != `{"v":1}` {
		t.Errorf("changed 1 = %+v, want it retiring, from its record", g)
	}
	if g := byKey["retired generation 2"]; !g.retiring || g.spec.Image == nil || g.spec.Image.Rootfs != img.Rootfs ||
		string(g.spec.Config) != string(retiredConf) || !reflect.DeepEqual(g.spec.AllowCapabilities, []string{"CAP_BPF"}) ||
		!reflect.DeepEqual(g.spec.AllowSyscalls, []string{"keyctl"}) {
		t.Errorf("retired = %+v, want it retiring from its record's image, config, capabilities and system calls", g.spec)
	}
	if g := byKey["lost generation 0"]; !g.retiring || g.spec.Image != nil || string(g.spec.Config) != string(lostConf) ||
		!errors.Is(g.spec.Err, imagefetch.ErrNotFound) || !strings.Contains(g.spec.Err.Error(), "its image "+gone+" is gone from the store") {
		t.Errorf("lost = %+v, want no image, its snapshot and an error naming %s", g.spec, gone)
	}
	if got := d.imageUsers(img.ID); !reflect.DeepEqual(got, []string{"changed", "retired"}) {
		t.Errorf("users = %v, want [changed retired]: their pods need the image to be torn down", got)
	}
	recs, err := d.store.Generations()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s/%d", r.Network, r.Generation))
	}
	slices.Sort(got)
	if want := []string{"changed/1", "changed/2", "kept/3", "retired/2"}; !slices.Equal(got, want) {
		t.Errorf("records %v, want %v: the orphan's gone, the new generation's journaled", got, want)
	}
}

func keys(gs []*generation) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.key.String())
	}
	return out
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
