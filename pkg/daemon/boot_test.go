package daemon

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
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
	"github.com/kurma-project/kurma/pkg/netconfig"
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
	d, err := New(Options{Config: cfg, Version: "test-version", Logger: testLogger(t, events)})
	if err != nil {
		t.Fatal(err)
	}
	d.agentPath = testutil.BuildStatic(t, "./cmd/kurma-agent")
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
// cannot be fetched and a journaled pod whose delete a killed daemon did
// not finish, then checks what each boot step promised.
func TestBoot(t *testing.T) {
	dir := shortDir(t)
	missing := filepath.Join(dir, "missing.aci")
	cfg := testConfig(t, dir, loopbackNet(t, "lo"),
		network{Name: "broken", ACI: "file://" + missing, Conf: map[string]any{"type": "loopback"}})
	unfinished := uuid.NewString()
	journalBeforeBoot(t, cfg, &state.Pod{ID: unfinished, Netns: filepath.Join(cfg.RunDir, "netns", unfinished),
		Created: time.Now().UTC(), Phase: state.PhaseDeleting})

	events := &logEvents{}
	var mu sync.Mutex
	var atReconciled struct {
		socketErr, infoErr error
		cleaned            any
	}
	d := newDaemon(t, dir, cfg, events)
	events.on(msgReconciled, func(e *logrus.Entry) {
		mu.Lock()
		defer mu.Unlock()
		_, atReconciled.socketErr = os.Lstat(d.opts.Socket)
		_, atReconciled.infoErr = api.NewClient(d.opts.Socket).Info(context.Background())
		atReconciled.cleaned = e.Data["cleaned"]
	})
	r := start(t, d, events)
	ctx := context.Background()

	t.Run("the API is served only after reconcile finished", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(atReconciled.socketErr, fs.ErrNotExist) || atReconciled.infoErr == nil {
			t.Errorf("when reconcile finished: socket %v, GET /v1/info %v; want no socket and no answer",
				atReconciled.socketErr, atReconciled.infoErr)
		}
		if atReconciled.cleaned != 1 {
			t.Errorf("reconcile cleaned %v pods, want the unfinished delete", atReconciled.cleaned)
		}
		for _, before := range []string{msgImageReady, msgFetchFailed} {
			if i, j := events.index(before), events.index(msgReconciled); i < 0 || i > j {
				t.Errorf("%q logged at %d, reconcile at %d: fetches come first", before, i, j)
			}
		}
		if pods, err := r.client.ListPods(ctx); err != nil || len(pods) != 0 {
			t.Errorf("pods = %+v, %v; want the unfinished delete finished", pods, err)
		}
	})

	t.Run("a network whose image cannot be fetched shows failed and does not stop the boot", func(t *testing.T) {
		nets, err := r.client.Networks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		state := map[string]api.Network{}
		for _, n := range nets {
			state[n.Name] = n
		}
		if lo := state["lo"]; lo.State != api.StateRunning || lo.Image != d.images.of("lo") || lo.Pid == 0 || lo.Since.IsZero() {
			t.Errorf("lo = %+v, want running from image %s, since its start", lo, d.images.of("lo"))
		}
		broken := state["broken"]
		if broken.State != api.StateFailed || !strings.Contains(broken.Reason, "image file://"+missing) ||
			!strings.Contains(broken.Reason, "no such file or directory") {
			t.Errorf("broken = %+v, want failed with the fetch error", broken)
		}
		_, err = r.client.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"broken"}})
		wantAPIError(t, err, http.StatusServiceUnavailable, api.CodeNetworkUnavailable, `network "broken"`)
		if pods, err := r.client.ListPods(ctx); err != nil || len(pods) != 0 {
			t.Errorf("pods after a refused create = %+v, %v; want none", pods, err)
		}
	})

	t.Run("the image a network runs from cannot be removed", func(t *testing.T) {
		id := d.images.of("lo")
		imgs, err := r.client.Images(ctx)
		if err != nil || len(imgs) != 1 || imgs[0].ID != id || !reflect.DeepEqual(imgs[0].InUse, []string{"lo"}) {
			t.Errorf("images = %+v, %v; want %s used by lo", imgs, err, id)
		}
		wantAPIError(t, r.client.RemoveImage(ctx, id), http.StatusConflict, api.CodeConflict, "used by network(s) [lo]")
	})

	t.Run("info", func(t *testing.T) {
		info, err := r.client.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := api.Info{Version: "test-version", StateDir: cfg.StateDir, RunDir: cfg.RunDir,
			Socket: filepath.Join(cfg.RunDir, "kurmad.sock"), Networks: 2, Uptime: info.Uptime}
		if info != want {
			t.Errorf("info = %+v, want %+v", info, want)
		}
	})
	r.stop(t)
}

// TestBootCancelled: a daemon told to stop while its plugin containers
// start returns the cancellation and leaves no container, mount or cgroup
// behind (newDaemon checks the last two; a container holds both).
func TestBootCancelled(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, loopbackNet(t, "lo"))
	events := &logEvents{}
	d := newDaemon(t, dir, cfg, events)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events.on(msgImageReady, func(*logrus.Entry) { cancel() })
	err := d.Run(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "networking pod") {
		t.Errorf("Run cancelled during the boot = %v, want the networking pod's start cancelled", err)
	}
	if events.index(msgImageReady) < 0 {
		t.Fatal("the daemon never fetched its image: the cancellation did not happen during the boot")
	}
	if i := events.index(msgReady); i >= 0 {
		t.Errorf("a cancelled boot went on to serve the API")
	}
}

// TestSecondDaemonOnSameStateDir: a second daemon on a state dir in use
// fails before it touches anything, saying why, and the first one serves on.
func TestSecondDaemonOnSameStateDir(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir)
	events := &logEvents{}
	first := start(t, newDaemon(t, dir, cfg, events), events)

	old := state.OpenTimeout
	state.OpenTimeout = 200 * time.Millisecond
	t.Cleanup(func() { state.OpenTimeout = old })
	second, err := New(Options{Config: cfg, Logger: testLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
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
// an error naming it; nothing of the networking pod or the API is made.
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

// journalBeforeBoot writes pods into cfg's journal as a killed daemon
// left them.
func journalBeforeBoot(t *testing.T, cfg *netconfig.Config, pods ...*state.Pod) {
	t.Helper()
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(filepath.Join(cfg.StateDir, "kurmad.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	journal(t, s, pods...)
}
