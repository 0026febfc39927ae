package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/networks"
	"github.com/kurma-project/kurma/pkg/state"
)

// The messages the boot tests wait for.
const (
	msgImageReady  = "image ready"
	msgFetchFailed = "image fetch failed"
	msgReconciled  = "journal reconciled"
	msgReady       = "kurmad ready"
)

// running is a Daemon whose Run goes on in the background.
type running struct {
	d      *Daemon
	client *api.Client
	cancel context.CancelFunc
	done   chan error // Run's result
}

// newDaemon returns a Daemon on cfg logging through events, with the
// kurma-agent built for the test binary, and registers the checks that the
// daemon, once stopped, left no mount under dir and no cgroup.
func newDaemon(t *testing.T, dir string, cfg *netconfig.Config, events *logEvents) *Daemon {
	t.Helper()
	testutil.RequireRoot(t)
	// Its stop stops its plugin containers, as the checks below want.
	d, err := New(Options{Config: cfg, Version: "test-version", Logger: testLogger(t, events), StopPlugins: true})
	if err != nil {
		t.Fatal(err)
	}
	d.agentPath = testutil.BuildStatic(t, "./cmd/kurma-agent")
	d.initPath = testutil.InitBinary(t)
	t.Cleanup(func() {
		if m := testutil.MountsUnder(dir); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
			testutil.UnmountUnder(dir)
		}
		for _, h := range testutil.CgroupHierarchies() {
			if p := filepath.Join(h, testutil.CgroupParent(cfg.RunDir)); exists(p) {
				t.Errorf("cgroup left: %s", p)
			}
		}
	})
	return d
}

// start runs d in the background and waits until it logs that it serves
// the API, failing t if Run returns first. It registers stop.
func start(t *testing.T, d *Daemon, events *logEvents) *running {
	t.Helper()
	ready := make(chan struct{})
	events.on(msgReady, func(*logrus.Entry) { close(ready) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, client: api.NewClient(d.opts.Socket), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	select {
	case <-ready:
	case err := <-r.done:
		r.done <- err // for stop
		t.Fatalf("Run returned during the boot: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("the daemon was not ready after 90s")
	}
	return r
}

// stop cancels Run's context, as SIGTERM does in kurmad, and checks that
// Run returns nil and removed its socket.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run after its context ended = %v, want nil", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Run did not return 90s after its context ended")
	}
	if exists(r.d.opts.Socket) {
		t.Errorf("socket %s left after Run returned", r.d.opts.Socket)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestBoot boots a daemon with a running network, a network whose image
// cannot be fetched, one whose fetch is slow, a journaled pod whose delete a
// killed daemon did not finish and a half-made pod attached to the slow
// network, then checks what each boot step promised.
func TestBoot(t *testing.T) {
	dir := shortDir(t)
	missing := filepath.Join(dir, "missing.aci")
	release := make(chan struct{})
	slowURL := slowImageServer(t, testutil.BuiltImage(t, "cni-netplugin.aci"), release)
	// Plain http, unpinned: only the network's own "verify": "none" lets it run.
	slow := network{Name: "slow", Image: slowURL, Conf: map[string]any{"type": "loopback", "verify": "none"}}
	cfg := testConfig(t, dir, loopbackNet(t, "lo"),
		network{Name: "broken", Image: "file://" + missing, Conf: map[string]any{"type": "loopback"}}, slow)
	unfinished, halfMade := uuid.NewString(), uuid.NewString()
	slowNet, _ := cfg.Network("slow")
	slowConf, _ := slowNet.PluginConfig(nil)
	journalBeforeBoot(t, cfg, []*state.Generation{{Network: "slow", Generation: 1, Hash: networks.Definition(slowNet),
		Definition: gendef.Definition{Config: slowConf}}},
		&state.Pod{ID: unfinished, Netns: filepath.Join(cfg.RunDir, "netns", unfinished),
			Created: time.Now().UTC(), Phase: state.PhaseDeleting},
		// Killed right after journaling its intent: its del must wait for
		// slow's container, and the pod must never be listed meanwhile.
		&state.Pod{ID: halfMade, Name: "half", Netns: filepath.Join(cfg.RunDir, "netns", halfMade), Created: time.Now().UTC(),
			Phase: state.PhaseCreating, Attachments: []state.Attachment{{Network: "slow", Generation: 1, Interface: "eth0",
				Config: slowConf, Phase: state.AttachIntent}}})

	events := &logEvents{}
	d := newDaemon(t, dir, cfg, events)
	r := start(t, d, events)
	ctx := context.Background()

	t.Run("the API is served while a fetch runs; what reconcile rolls back is not listed", func(t *testing.T) {
		if i, j := events.index(msgReconciled), events.index(msgReady); i < 0 || i > j {
			t.Errorf("reconcile logged at %d, ready at %d: reconcile comes first", i, j)
		}
		n := networkNamed(t, r, "slow")
		if n.State != api.StateFetching || n.Generation != 1 {
			t.Errorf("slow = %+v, want generation 1 (its journaled one) fetching", n)
		}
		_, err := r.client.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"slow"}})
		wantAPIError(t, err, http.StatusServiceUnavailable, api.CodeNetworkUnavailable, `network "slow": unavailable: fetching its image`)
		if pods, err := r.client.ListPods(ctx); err != nil || len(pods) != 0 {
			t.Errorf("pods = %+v, %v; want the unfinished delete finished and the half-made pod unlisted", pods, err)
		}
		if rec, err := d.store.GetPod(halfMade); err != nil || rec.Phase != state.PhaseCreating {
			t.Errorf("half-made pod = %+v, %v; want it journaled, waiting for slow", rec, err)
		}
		close(release)
		testutil.WaitFor(t, 30*time.Second, "slow to run and its rollback to finish", func() error {
			if n := networkNamed(t, r, "slow"); n.State != api.StateRunning {
				return fmt.Errorf("slow is %s", n.State)
			}
			if _, err := d.store.GetPod(halfMade); err == nil {
				return errors.New("the half-made pod is still journaled")
			}
			return nil
		})
	})

	t.Run("a network whose image cannot be fetched shows failed, with its next attempt", func(t *testing.T) {
		// The API is served before every container runs: wait for lo's.
		lo := waitNetworkIn(t, r, "lo", api.StateRunning)
		if lo.Image != d.imageOf("lo") || lo.Pid == 0 || lo.Since.IsZero() || lo.Generation != 1 {
			t.Errorf("lo = %+v, want generation 1 running from image %s, since its start", lo, d.imageOf("lo"))
		}
		var broken api.Generation
		testutil.WaitFor(t, 10*time.Second, "broken's fetch to fail", func() error {
			if broken = networkNamed(t, r, "broken"); broken.State != api.StateFailed || broken.NextRetry.IsZero() {
				return fmt.Errorf("broken = %+v", broken)
			}
			return nil
		})
		if !strings.Contains(broken.Reason, "image file://"+missing) || !strings.Contains(broken.Reason, "no such file or directory") {
			t.Errorf("broken = %+v, want failed with the fetch error", broken)
		}
		_, err := r.client.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"broken"}})
		wantAPIError(t, err, http.StatusServiceUnavailable, api.CodeNetworkUnavailable, `network "broken"`)
		if pods, err := r.client.ListPods(ctx); err != nil || len(pods) != 0 {
			t.Errorf("pods after a refused create = %+v, %v; want none", pods, err)
		}
	})

	t.Run("the image a network runs from cannot be removed", func(t *testing.T) {
		id := d.imageOf("lo")
		imgs, err := r.client.Images(ctx)
		if err != nil || len(imgs) != 1 || imgs[0].ID != id || !reflect.DeepEqual(imgs[0].InUse, []string{"lo", "slow"}) {
			t.Errorf("images = %+v, %v; want %s used by lo and slow", imgs, err, id)
		}
		wantAPIError(t, r.client.RemoveImage(ctx, id), http.StatusConflict, api.CodeConflict, "used by network(s) [lo slow]")
	})

	t.Run("info", func(t *testing.T) {
		// The boot's gc of lo and slow ran once their containers ran;
		// broken's waits for a container that cannot start.
		var info api.Info
		testutil.WaitFor(t, 10*time.Second, "only broken's gc to wait", func() error {
			var err error
			if info, err = r.client.Info(ctx); err != nil {
				return err
			}
			if !slices.Equal(info.GCWaiting, []string{"broken"}) {
				return fmt.Errorf("gcs of %v wait", info.GCWaiting)
			}
			return nil
		})
		want := api.Info{Version: "test-version", StateDir: cfg.StateDir, RunDir: cfg.RunDir,
			Socket: filepath.Join(cfg.RunDir, "kurmad.sock"), Networks: 3, GCWaiting: []string{"broken"}, Uptime: info.Uptime}
		if !reflect.DeepEqual(info, want) {
			t.Errorf("info = %+v, want %+v", info, want)
		}
	})
	r.stop(t)
}

// networkNamed is the newest generation of the named network GET
// /v1/networks lists.
func networkNamed(t *testing.T, r *running, name string) api.Generation {
	t.Helper()
	nets, err := r.client.Networks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		if n.Network == name {
			return n
		}
	}
	t.Fatalf("network %s not listed in %+v", name, nets)
	return api.Generation{}
}

// waitNetworkIn waits until the newest generation of the named network is
// in state, and returns it.
func waitNetworkIn(t *testing.T, r *running, name, state string) api.Generation {
	t.Helper()
	var n api.Generation
	testutil.WaitFor(t, 30*time.Second, name+" to be "+state, func() error {
		if n = networkNamed(t, r, name); n.State != state {
			return fmt.Errorf("%s = %+v", name, n)
		}
		return nil
	})
	return n
}

// slowImageServer serves the file at path over plain HTTP, each request
// only once release is closed, and returns its URL.
func slowImageServer(t *testing.T, path string, release <-chan struct{}) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		http.ServeFile(w, r, path)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(path)
}

// TestBootCancelled: a daemon told to stop during its boot returns and
// leaves no container, mount or cgroup behind (newDaemon checks the last
// two; a container holds both).
func TestBootCancelled(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, loopbackNet(t, "lo"))
	events := &logEvents{}
	d := newDaemon(t, dir, cfg, events)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events.on(msgImageReady, func(*logrus.Entry) { cancel() })
	err := d.Run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run cancelled during the boot = %v, want nil or the cancellation", err)
	}
	if events.index(msgImageReady) < 0 {
		t.Fatal("the daemon never fetched its image: the cancellation did not happen during the boot")
	}
	if exists(d.opts.Socket) {
		t.Errorf("socket %s left", d.opts.Socket)
	}
}

// TestSecondDaemonOnSameStateDir: a second daemon on a state dir in use
// fails before it touches anything, saying why, and the first one serves on.
func TestSecondDaemonOnSameStateDir(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir)
	events := &logEvents{}
	first := start(t, newDaemon(t, dir, cfg, events), events)

	second, err := New(Options{Config: cfg, Logger: testLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	second.journalWait = 200 * time.Millisecond
	err = second.Run(context.Background())
	if !errors.Is(err, state.ErrInUse) {
		t.Fatalf("second Run = %v, want state.ErrInUse", err)
	}
	for _, want := range []string{filepath.Join(cfg.StateDir, "kurmad.db"), "is another kurmad running with the same state_dir?"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second Run = %q, want it to say %q", err, want)
		}
	}
	if _, err := first.client.Info(context.Background()); err != nil {
		t.Errorf("the first daemon after the second failed: %v", err)
	}
}

// TestUnwritableStateDir: a read-only state dir stops the boot at once with
// an error naming it; nothing of the plugin host or the API is made.
func TestUnwritableStateDir(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, loopbackNet(t, "lo"))
	d := newDaemon(t, dir, cfg, &logEvents{})
	readOnly(t, cfg.StateDir)
	err := d.Run(context.Background())
	if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "state_dir "+cfg.StateDir+" is not writable") {
		t.Errorf("Run on a read-only state dir = %v, want EROFS naming the dir", err)
	}
	for _, p := range []string{filepath.Join(cfg.RunDir, "netns"), d.opts.Socket} {
		if exists(p) {
			t.Errorf("%s exists after a boot that failed on its state dir", p)
		}
	}
}

// readOnly makes dir a read-only bind mount of itself until the test ends.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
}

// journalBeforeBoot writes generation records and pods into cfg's journal
// as a killed daemon left them.
func journalBeforeBoot(t *testing.T, cfg *netconfig.Config, gens []*state.Generation, pods ...*state.Pod) {
	t.Helper()
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(filepath.Join(cfg.StateDir, "kurmad.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, g := range gens {
		if err := s.PutGeneration(g); err != nil {
			t.Fatal(err)
		}
	}
	journal(t, s, pods...)
}

// TestImageChangedWhileDown: the image behind an unchanged entry's URI
// changed while kurmad was down, and a journaled pod was attached through
// the old one: its del runs in the journaled generation, from the old
// image, while the new image becomes a new generation that serves new
// pods; once the pod is gone the old generation stops.
func TestImageChangedWhileDown(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, loopbackNet(t, "lo"))
	// The old image: the same plugin as an OCI layout, another ID.
	f, err := imagefetch.New(imagefetch.Options{Dir: filepath.Join(cfg.StateDir, "images"), Logger: testLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	old, err := f.Fetch(context.Background(), "file://"+testutil.BuiltImage(t, "cni-netplugin"))
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := cfg.Network("lo")
	conf, _ := lo.PluginConfig(nil)
	pod := uuid.NewString()
	journalBeforeBoot(t, cfg, []*state.Generation{{Network: "lo", Generation: 1, Hash: networks.Definition(lo),
		Definition: gendef.Definition{Image: gendef.Ref(old.ID), Config: conf}}},
		// Its netns vanished: reconcile deletes it, in generation 1.
		&state.Pod{ID: pod, Netns: filepath.Join(cfg.RunDir, "netns", pod), Created: time.Now().UTC(), Phase: state.PhaseReady,
			Attachments: []state.Attachment{{Network: "lo", Generation: 1, Image: old.ID, Interface: "eth0", Config: conf,
				Phase: state.AttachDone, Result: []byte(`{"cniVersion":"1.1.0"}`)}}})

	events := &logEvents{}
	var mu sync.Mutex
	var dels []any
	events.on("network detached", func(e *logrus.Entry) {
		mu.Lock()
		defer mu.Unlock()
		dels = append(dels, e.Data["generation"])
	})
	d := newDaemon(t, dir, cfg, events)
	d.opts.Logger.(*logrus.Logger).SetLevel(logrus.DebugLevel)
	r := start(t, d, events)
	var gens []api.Generation
	testutil.WaitFor(t, 30*time.Second, "generation 2 alone, the pod deleted", func() error {
		nets, err := r.client.Networks(context.Background())
		if err != nil {
			return err
		}
		gens = nets
		if len(nets) != 1 || nets[0].Generation != 2 || nets[0].State != api.StateRunning {
			return fmt.Errorf("networks %+v", nets)
		}
		if _, err := d.store.GetPod(pod); err == nil {
			return errors.New("the pod is still journaled")
		}
		return nil
	})
	if gens[0].Image == old.ID || gens[0].Image != d.imageOf("lo") {
		t.Errorf("generation 2 runs %s, want the new image, not %s", gens[0].Image, old.ID)
	}
	mu.Lock()
	if fmt.Sprint(dels) != "[1]" {
		t.Errorf("dels ran in generations %v, want [1]", dels)
	}
	mu.Unlock()
	// The old image is in the store: generation 1 ran from it at once,
	// and the URI's image, fetched beside it, replaced it.
	if events.index("the network's image changed since the last run: a new generation replaces the one running, once it runs") < 0 {
		t.Error("the change of image was not logged")
	}
	recs, err := d.store.Generations()
	if err != nil || len(recs) != 1 || recs[0].Generation != 2 || gendef.IDOf(recs[0].Image) != gens[0].Image {
		t.Errorf("records %+v, %v; want generation 2's alone", recs, err)
	}
	r.stop(t)
}

// TestBusyMetricsAddress: a metrics_listen address another process holds
// stops the boot before anything runs, with an error naming the address;
// no plugin host, no API socket.
func TestBusyMetricsAddress(t *testing.T) {
	dir := shortDir(t)
	holder, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	cfg := testConfig(t, dir)
	cfg.MetricsListen = holder.Addr().String()
	d := newDaemon(t, dir, cfg, &logEvents{})
	err = d.Run(context.Background())
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "metrics_listen "+cfg.MetricsListen) {
		t.Errorf("Run with a busy metrics_listen = %v, want EADDRINUSE naming the address", err)
	}
	for _, p := range []string{filepath.Join(cfg.RunDir, "netns"), d.opts.Socket} {
		if exists(p) {
			t.Errorf("%s exists after a boot that failed on its metrics address", p)
		}
	}
}
