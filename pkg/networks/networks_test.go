package networks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/state"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}

// netplugACI is the file:// URI of the cni-netplugin image `make images`
// builds; its setup accepts a config of type loopback with nothing else.
func netplugACI(t testing.TB) string {
	return "file://" + testutil.BuiltImage(t, "cni-netplugin.aci")
}

// testConfig is a validated config of the given pod_networks entries, its
// state and run dirs under dir (short: unix socket paths under the run dir
// are limited).
func testConfig(t testing.TB, dir string, entries ...map[string]any) *netconfig.Config {
	t.Helper()
	data, err := json.Marshal(map[string]any{"state_dir": filepath.Join(dir, "state"), "run_dir": filepath.Join(dir, "run"),
		"plugin_timeout": "20s", "pod_networks": entries})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconfig.Parse(data, dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// loopback is a config entry whose plugin container really runs, from
// image.
func loopback(name, image string) map[string]any {
	return map[string]any{"name": name, "image": image, "type": "loopback"}
}

// shortDir is a fresh temp dir with a short path (testutil.ShortDir).
func shortDir(t testing.TB) string { return testutil.ShortDir(t, "ktn") }

// newController is a Controller over cfg with its journal and image store
// open in cfg's state dir; nothing started. agent is the kurma-agent
// binary: any existing file for a controller whose host never starts.
func newController(t testing.TB, cfg *netconfig.Config, agent string) *Controller {
	t.Helper()
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(filepath.Join(cfg.StateDir, "kurmad.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	log := logrus.New()
	log.SetOutput(testutil.LogWriter(t))
	f, err := imagefetch.New(imagefetch.Options{Dir: filepath.Join(cfg.StateDir, "images"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Config: cfg, Store: store, Fetcher: f, Logger: log,
		Host: networkpod.Options{RunDir: cfg.RunDir, StateDir: cfg.StateDir, AgentPath: agent, InitPath: testutil.InitBinary(t), Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bootPlan is c.planBoot, which prepares c's plugin host (its netns dir's
// mount, the sort of an earlier kurmad's containers) to learn what it may
// adopt: c is stopped at the test's end, which removes what that made.
func bootPlan(t testing.TB, c *Controller) ([]*generation, error) {
	t.Helper()
	testutil.RequireRoot(t)
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c.planBoot()
}

// fetch puts uri's image in c's store.
func fetch(t testing.TB, c *Controller, uri string) *imagefetch.Image {
	t.Helper()
	img, err := c.opts.Fetcher.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	return img
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

// TestImageUsers: the image generations run from lists their networks as
// its users; the serving generation's image is what new pods are served with.
func TestImageUsers(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, loopback("b", netplugACI(t)), loopback("a", netplugACI(t)),
		loopback("c", "file://"+filepath.Join(dir, "missing.aci")))
	c := newController(t, cfg, os.Args[0])
	gens, err := bootPlan(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 3 || gens[0].key.Network != "b" || gens[1].key.Network != "a" || gens[2].key.Network != "c" {
		t.Fatalf("generations = %+v, want b, a, c in config order", gens)
	}
	img := fetch(t, c, netplugACI(t))
	gens[0].spec.Image, gens[1].spec.Image = img, img // as fetched does
	c.publish()
	if got := c.ImageUsers(img.ID); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("users(%s) = %v, want [a b]", img.ID, got)
	}
	_, to := c.Serving()
	if got := to["a"]; got.Image != img.ID || got.Target != (netplugin.Target{Network: "a", Generation: 1}) {
		t.Errorf("route of a = %+v, want generation 1 with image %s", got, img.ID)
	}
	if got := to["c"].Image; got != "" {
		t.Errorf("route of c has image %q, want none", got)
	}
}

// TestPlanBoot: a config entry whose definition is journaled gets that
// generation again; a changed one a new generation, and the old one, which
// pods still use, retires, run from its record; a network gone from the
// config is run, retiring, from its record (image, config, capabilities)
// for its pods; attachments of a kurmad without generations from their
// newest snapshot, failing when that image is gone; records nothing uses
// go. Each generation is held by the pods its journaled attachments are.
func TestPlanBoot(t *testing.T) {
	dir := t.TempDir()
	changed := loopback("changed", netplugACI(t))
	changed["v"] = 2
	cfg := testConfig(t, dir, loopback("kept", netplugACI(t)), changed)
	c := newController(t, cfg, os.Args[0])
	img := fetch(t, c, netplugACI(t))
	gone := "sha512-" + strings.Repeat("0", 128)
	kept, _ := cfg.Network("kept")
	retiredConf := []byte(`{"name":"retired","type":"loopback"}`)
	store := c.opts.Store
	for _, g := range []*state.Generation{
		{Network: "kept", Generation: 3, Definition: Definition(kept), Image: img.ID, Config: []byte(`{}`)},
		{Network: "changed", Generation: 1, Definition: "old", Image: img.ID, Config: []byte(`{"v":1}`)},
		{Network: "retired", Generation: 2, Definition: "r", Image: img.ID, Config: retiredConf, AllowCapabilities: []string{"CAP_BPF"}, AllowSyscalls: []string{"keyctl"}},
		{Network: "orphan", Generation: 5, Definition: "o", Image: img.ID},
	} {
		if err := store.PutGeneration(g); err != nil {
			t.Fatal(err)
		}
	}
	lostConf := []byte(`{"name":"lost","type":"loopback"}`)
	t0 := time.Now().UTC()
	journal(t, store,
		&state.Pod{ID: "p1", Created: t0, Phase: state.PhaseReady, Attachments: []state.Attachment{
			{Network: "kept", Generation: 3, Image: img.ID, Phase: state.AttachDone},
			{Network: "changed", Generation: 1, Image: img.ID, Phase: state.AttachDone},
			{Network: "retired", Generation: 2, Config: []byte(`{"per":"pod"}`), Image: img.ID, Phase: state.AttachDone},
			{Network: "lost", Config: lostConf, Image: gone, Phase: state.AttachIntent},
		}},
		&state.Pod{ID: "p2", Created: t0.Add(time.Second), Phase: state.PhaseFailed, Attachments: []state.Attachment{
			{Network: "changed", Generation: 1, Image: img.ID, Phase: state.AttachDone},
			{Network: "retired", Generation: 2, Image: img.ID, Phase: state.AttachDone, Deleted: true},
		}},
	)
	gens, err := bootPlan(t, c)
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
	// Its image is in the store: it starts from it at once (or adopts the
	// container an earlier kurmad left), its URI fetched beside it.
	if g := byKey["kept generation 3"]; g.retiring || g.entry == nil || g.storedImage != img.ID || !g.attached ||
		g.spec.Image == nil || g.spec.Image.ID != img.ID || !g.checking {
		t.Errorf("kept = %+v, want its journaled generation again, run from its stored image, its URI checked", g)
	}
	if g := byKey["changed generation 2"]; g.retiring || g.entry == nil || c.nets["changed"].serving != g {
		t.Errorf("changed 2 = %+v, want a new generation serving the changed entry", g)
	}
	if g := byKey["changed generation 1"]; !g.retiring || g.spec.Image == nil || g.spec.Image.ID != img.ID || string(g.spec.Config) != `{"v":1}` {
		t.Errorf("changed 1 = %+v, want it retiring, from its record", g)
	}
	if g := byKey["retired generation 2"]; !g.retiring || g.spec.Image == nil || g.spec.Image.Rootfs != img.Rootfs ||
		string(g.spec.Config) != string(retiredConf) || !reflect.DeepEqual(g.spec.AllowCapabilities, []string{"CAP_BPF"}) ||
		!reflect.DeepEqual(g.spec.AllowSyscalls, []string{"keyctl"}) {
		t.Errorf("retired = %+v, want it retiring from its record's image, config, capabilities and system calls", g.spec)
	}
	if g := byKey["lost generation 0"]; !g.retiring || g.spec.Image != nil || string(g.spec.Config) != string(lostConf) ||
		g.waiting != StateFailed || !strings.Contains(g.reason, "its image "+gone+" is gone from the store") {
		t.Errorf("lost = %+v, want no image, its snapshot and failed naming %s", g, gone)
	}
	if _, err := c.opts.Fetcher.Get(gone); !errors.Is(err, imagefetch.ErrNotFound) {
		t.Fatalf("the gone image is in the store: %v", err)
	}
	holders := map[string][]string{}
	for k, g := range byKey {
		for h := range g.holders {
			holders[k] = append(holders[k], h)
		}
		slices.Sort(holders[k])
	}
	if want := map[string][]string{"kept generation 3": {"p1"}, "changed generation 1": {"p1", "p2"}, "retired generation 2": {"p1"},
		"lost generation 0": {"p1"}}; fmt.Sprint(holders) != fmt.Sprint(want) {
		t.Errorf("holders %v, want %v: the pods of the attachments whose del has not succeeded", holders, want)
	}
	if got := c.ImageUsers(img.ID); !reflect.DeepEqual(got, []string{"changed", "kept", "retired"}) {
		t.Errorf("users = %v, want [changed kept retired]: kept runs from it, the others' pods need it to be torn down", got)
	}
	recs, err := store.Generations()
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

// TestRetainRelease: a retiring generation stays while something holds
// it, holding is a set per holder, and once the last holder released it
// it stops: forgotten, its record gone, and a Retain of it fails with
// ErrUnknownGeneration (a create then asks Serving again). Each generation
// counts its holders (Pods), and a change of the count is a new revision. A
// generation the config serves is never stopped for want of holders.
func TestRetainRelease(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, loopback("kept", netplugACI(t)))
	c := newController(t, cfg, os.Args[0])
	gone := "sha512-" + strings.Repeat("0", 128)
	old := netplugin.Target{Network: "old", Generation: 4}
	if err := c.opts.Store.PutGeneration(&state.Generation{Network: "old", Generation: 4, Definition: "o", Image: gone}); err != nil {
		t.Fatal(err)
	}
	journal(t, c.opts.Store, &state.Pod{ID: "p1", Created: time.Now(), Phase: state.PhaseReady,
		Attachments: []state.Attachment{{Network: "old", Generation: 4, Image: gone, Phase: state.AttachDone}}})
	if _, err := bootPlan(t, c); err != nil {
		t.Fatal(err)
	}
	kept := netplugin.Target{Network: "kept", Generation: 1}
	if err := c.Retain("p2", old, kept); err != nil {
		t.Fatal(err)
	}
	rev, _ := c.Revision()
	if err := c.Retain("p2", old); err != nil {
		t.Fatal(err)
	}
	if now, _ := c.Revision(); now != rev {
		t.Errorf("a Retain of what p2 holds already changed the revision")
	}
	if got := podsOf(c, old); got != 2 {
		t.Errorf("old counts %d pods, want 2 (p1, p2)", got)
	}
	c.Release("p1", old)
	if now, _ := c.Revision(); now == rev || podsOf(c, old) != 1 {
		t.Errorf("after p1's release: revision %s (was %s), %d pods: want a new revision, 1 pod", now, rev, podsOf(c, old))
	}
	c.Release("kept-holder", kept) // not held by it: nothing changes
	c.bg.Wait()                    // a stopRetired Release started
	if err := c.Retain("p3", old); err != nil {
		t.Fatalf("old, still held by p2: %v", err)
	}
	c.Release("p3", old)
	c.Release("p2", old, kept)
	c.bg.Wait()
	if err := c.Retain("p4", old); !errors.Is(err, netplugin.ErrUnknownGeneration) {
		t.Errorf("Retain of a stopped generation: %v, want ErrUnknownGeneration", err)
	}
	if err := c.Retain("p4", kept); err != nil {
		t.Errorf("the serving generation went with its last holder: %v", err)
	}
	if recs, err := c.opts.Store.Generations(); err != nil || slices.ContainsFunc(recs, func(g *state.Generation) bool { return g.Network == "old" }) {
		t.Errorf("records %+v, %v: want old's gone", recs, err)
	}
	for _, g := range c.Generations() {
		if g.Network == "old" {
			t.Errorf("old still listed: %+v", g)
		}
	}
	if _, _, err := c.GCTarget("old"); !errors.Is(err, netplugin.ErrUnknownNetwork) {
		t.Errorf("GCTarget of a network nothing knows any more: %v, want ErrUnknownNetwork", err)
	}
	if _, _, err := c.GCTarget("kept"); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Errorf("GCTarget while no generation of kept runs: %v, want ErrUnavailable", err)
	}
}

// podsOf is t's Pods as Generations lists it, -1 when it is not listed.
func podsOf(c *Controller, t netplugin.Target) int {
	for _, g := range c.Generations() {
		if g.Network == t.Network && g.Generation == t.Generation {
			return g.Pods
		}
	}
	return -1
}

// TestWaitForImage: a generation whose image cannot be fetched shows
// failed, with the fetch's error and its next attempt, and refuses calls
// and creates at once, with that reason (its gc waits); a retry fetches
// again, and once the image is there its container runs and serves
// calls; Started wakes whoever waited for it.
func TestWaitForImage(t *testing.T) {
	testutil.RequireRoot(t)
	dir := shortDir(t)
	img := filepath.Join(dir, "later.aci")
	cfg := testConfig(t, dir, loopback("ktw", "file://"+img))
	c := newController(t, cfg, testutil.BuildStatic(t, "./cmd/kurma-agent"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Error(err)
		}
		if m := testutil.MountsUnder(dir); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
			testutil.UnmountUnder(dir)
		}
	})
	ctx := context.Background()
	started := c.Started()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	status := func() Status {
		gens := c.Generations()
		if len(gens) != 1 {
			t.Fatalf("generations %+v, want ktw's", gens)
		}
		return gens[0]
	}
	var failed Status
	testutil.WaitFor(t, 10*time.Second, "the fetch to fail", func() error {
		if failed = status(); failed.State != StateFailed || failed.NextRetry.IsZero() {
			return fmt.Errorf("ktw = %+v", failed)
		}
		return nil
	})
	if !strings.Contains(failed.Reason, "no such file or directory") || failed.Generation != 1 {
		t.Errorf("ktw = %+v, want generation 1 failed with the fetch's error", failed)
	}
	k := netplugin.Target{Network: "ktw", Generation: 1}
	_, _, err := c.Exec(ctx, netplugin.NewCall(k, netplugin.AddPath, nil, nil))
	if !errors.Is(err, netplugin.ErrUnavailable) || !strings.Contains(err.Error(), `network "ktw": unavailable: `) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Exec while its fetch failed: %v", err)
	}
	if err := c.Ready(k); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Errorf("Ready while its fetch failed: %v", err)
	}
	if _, _, err := c.GCTarget("ktw"); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Errorf("GCTarget while nothing runs: %v", err)
	}

	testutil.CopyExecutable(t, testutil.BuiltImage(t, "cni-netplugin.aci"), img)
	if _, err := c.Retry("ktw"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("Started not closed 30s after the image came")
	}
	testutil.WaitFor(t, 30*time.Second, "ktw to run", func() error {
		if st := status(); st.State != StateRunning || st.Pid == 0 || st.Image == "" {
			return fmt.Errorf("ktw = %+v", st)
		}
		return nil
	})
	if err := c.Ready(k); err != nil {
		t.Errorf("Ready once it runs: %v", err)
	}
	if _, to := c.Serving(); to["ktw"].Image != status().Image {
		t.Errorf("route %+v, want the image it runs, %s", to["ktw"], status().Image)
	}
	if got, conf, err := c.GCTarget("ktw"); err != nil || got != k || !strings.Contains(string(conf), `"type":"loopback"`) {
		t.Errorf("GCTarget = %v %s %v, want generation 1 with its config", got, conf, err)
	}
	_, _, err = c.Exec(ctx, netplugin.NewCall(k, netplugin.StatusPath, nil, []byte(`{"cniVersion":"1.1.0","name":"ktw","type":"loopback"}`)))
	if errors.Is(err, netplugin.ErrUnavailable) || errors.Is(err, netplugin.ErrUnknownGeneration) {
		t.Errorf("a call once it runs did not reach its container: %v", err)
	}
}

// TestJournaledLimitsKept: a generation journaled with limits and
// main_sees_pods, its entry gone from the config, is run after a kill -9
// from its record with the same limits and main_sees_pods, so its pods'
// dels run in the container they were attached in.
func TestJournaledLimitsKept(t *testing.T) {
	dir := t.TempDir()
	lim := loopback("lim", netplugACI(t))
	lim["limits"] = map[string]any{"pids": 64, "call_memory": "32Mi", "state_dir": 0}
	lim["main_sees_pods"] = true
	cfg := testConfig(t, dir, lim)
	c := newController(t, cfg, os.Args[0])
	img := fetch(t, c, netplugACI(t))
	gens, err := bootPlan(t, c)
	if err != nil {
		t.Fatal(err)
	}
	g := gens[0]
	g.spec.Image = img // as fetched does, which records it
	c.record(g)
	journal(t, c.opts.Store, &state.Pod{ID: "p1", Created: time.Now().UTC(), Phase: state.PhaseReady, Attachments: []state.Attachment{
		{Network: "lim", Generation: g.key.Generation, Image: img.ID, Phase: state.AttachDone}}})
	want := g.spec.Limits
	if want.Pids != 64 || want.CallMemory != 32<<20 || want.StateDir != netconfig.NoLimit || !g.spec.MainSeesPods {
		t.Fatalf("generation's spec = %+v: the config's limits not read", g.spec)
	}

	// Killed: the journal as the kernel holds it, in another state dir;
	// the entry is gone from the next config.
	dir2 := t.TempDir()
	cfg2 := testConfig(t, dir2, loopback("other", netplugACI(t)))
	if err := os.MkdirAll(cfg2.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cfg.StateDir, "kurmad.db*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg2.StateDir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c2 := newController(t, cfg2, os.Args[0])
	fetch(t, c2, netplugACI(t))
	gens2, err := bootPlan(t, c2)
	if err != nil {
		t.Fatal(err)
	}
	for _, g2 := range gens2 {
		if g2.key != g.key {
			continue
		}
		if !g2.retiring || g2.spec.Limits != want || !g2.spec.MainSeesPods {
			t.Errorf("restarted generation: retiring %v, limits %+v, main_sees_pods %v; want retiring, %+v, true",
				g2.retiring, g2.spec.Limits, g2.spec.MainSeesPods, want)
		}
		return
	}
	t.Fatalf("generations after the restart %v: %v missing", keys(gens2), g.key)
}
