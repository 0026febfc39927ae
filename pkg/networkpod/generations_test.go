package networkpod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// statusOfGen is the status of one generation of a network.
func statusOfGen(p *Host, name string, gen int) Status {
	for _, s := range p.Status() {
		if s.Network == name && s.Generation == gen {
			return s
		}
	}
	return Status{}
}

// TestGenerationsSideBySide: two generations of one network run side by
// side, each a container of its own named after both, sharing the
// network's plugin state dir; calls go to the generation they name;
// removing one stops it alone and leaves the other's process as it was.
func TestGenerationsSideBySide(t *testing.T) {
	p := newTestHost(t, nil)
	img1, img2 := toolImage(t, "main"), toolImage(t, "main")
	// Generation 2's image has no /bin/fail: which container ran a call
	// shows in its error.
	if err := os.Remove(filepath.Join(img2.Rootfs, "bin", "fail")); err != nil {
		t.Fatal(err)
	}
	startGenerations(t, p, Spec{Network: "ktg", Generation: 1, Image: img1})
	startGenerations(t, p, Spec{Network: "ktg", Generation: 2, Image: img2})
	g1, g2 := statusOfGen(p, "ktg", 1), statusOfGen(p, "ktg", 2)
	if g1.State != StateRunning || g2.State != StateRunning || g1.Pid == g2.Pid {
		t.Fatalf("generations: %+v, %+v; want both running", g1, g2)
	}
	for _, key := range []string{"ktg+1", "ktg+2"} {
		for _, d := range []string{filepath.Join(p.containersRoot(), "kurma-net-"+key), p.networkRunDir(key)} {
			if _, err := os.Stat(d); err != nil {
				t.Errorf("generation %s: %v", key, err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(p.pluginStateHostDir("ktg"), "lease"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err := p.Exec(ctx, testCall("ktg", 1, "/bin/fail", nil, nil))
	var ee *netplugin.ExecError
	if !errors.As(err, &ee) || ee.ExitCode != 1 {
		t.Errorf("generation 1 /bin/fail: %v, want its exit 1", err)
	}
	if _, _, err := p.Exec(ctx, testCall("ktg", 2, "/bin/fail", nil, nil)); errors.As(err, &ee) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("generation 2 /bin/fail: %v, want it missing from generation 2's image", err)
	}
	if _, _, err := p.Exec(ctx, testCall("ktg", 3, "/bin/echo", nil, nil)); !errors.Is(err, netplugin.ErrUnknownGeneration) || !strings.Contains(err.Error(), `network "ktg": unknown generation 3`) {
		t.Errorf("generation 3: %v, want netplugin.ErrUnknownGeneration naming it", err)
	}

	if err := p.Remove(ctx, "ktg", 1); err != nil {
		t.Fatal(err)
	}
	if processExists(g1.Pid) {
		t.Errorf("generation 1's main %d survived its removal", g1.Pid)
	}
	if st := p.Status(); len(st) != 1 || st[0].Generation != 2 || st[0].Pid != g2.Pid || st[0].Restarts != 0 {
		t.Errorf("after removing generation 1: %+v, want generation 2 untouched (pid %d)", st, g2.Pid)
	}
	if _, err := os.Stat(p.networkRunDir("ktg+1")); !os.IsNotExist(err) {
		t.Errorf("generation 1's run dir: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(p.pluginStateHostDir("ktg"), "lease")); err != nil {
		t.Errorf("the network's plugin state went with a generation: %v", err)
	}
	if out, _, err := p.Exec(ctx, testCall("ktg", 2, "/bin/echo", nil, []byte("g2"))); err != nil || string(out) != "g2" {
		t.Errorf("generation 2 after generation 1's removal: %q %v", out, err)
	}
	if _, _, err := p.Exec(ctx, testCall("ktg", 1, "/bin/echo", nil, nil)); !errors.Is(err, netplugin.ErrUnknownGeneration) {
		t.Errorf("removed generation 1: %v, want netplugin.ErrUnknownGeneration", err)
	}
}

// TestStartNeedsImage: a generation without its image is refused, and
// nothing of it starts: waiting for an image is networks.Controller's.
func TestStartNeedsImage(t *testing.T) {
	p := newTestHost(t, nil)
	err := p.Start(context.Background(), []Spec{{Network: "ktw", Generation: 1}})
	if err == nil || !strings.Contains(err.Error(), `network "ktw" generation 1 has no image`) {
		t.Errorf("Start without an image: %v", err)
	}
	if st := p.Status(); len(st) != 0 {
		t.Errorf("status %+v, want nothing started", st)
	}
}

// TestRetryNow cuts a failed generation's restart backoff short.
func TestRetryNow(t *testing.T) {
	p := newTestHost(t, func(o *Options) { o.RestartBase, o.RestartMax = time.Minute, time.Minute })
	startGenerations(t, p, Spec{Network: "ktr", Generation: 1, Image: toolImage(t, "failmain")})
	var failed Status
	testutil.WaitFor(t, 5*time.Second, "ktr to fail", statusWhere(p, "ktr", func(st Status) bool {
		failed = st
		return st.State == StateFailed && !st.NextRetry.IsZero()
	}))
	if d := time.Until(failed.NextRetry); d < 50*time.Second {
		t.Errorf("next retry in %v, want the minute of backoff", d)
	}
	if !p.RetryNow("ktr", 1) {
		t.Fatal("RetryNow: nothing was waiting")
	}
	testutil.WaitFor(t, 5*time.Second, "ktr to be restarted now", statusWhere(p, "ktr", func(st Status) bool { return st.Restarts == 1 }))
	if p.RetryNow("nope", 1) {
		t.Error("RetryNow of an unknown network said it retried")
	}
}
