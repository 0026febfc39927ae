package networkpod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// TestStatusReadiness: a network whose status executable fails is
// unavailable with the plugin's message from its first start on (Ready
// refuses it, Exec still runs calls, del and check need them), and running
// again once status passes; an image without the executable is not asked.
func TestStatusReadiness(t *testing.T) {
	var mu sync.Mutex
	var calls []Call
	p := newTestHost(t, func(o *Options) {
		o.StatusPath = "/bin/status"
		o.StatusInterval = 50 * time.Millisecond
		o.OnCall = func(c *Call) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, *c)
		}
	})
	notReady := filepath.Join(p.opts.StateDir, "networks", "kte", "not-ready")
	if err := os.MkdirAll(filepath.Dir(notReady), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notReady, []byte("uplink down\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noStatus := toolImage(t, "main")
	if err := os.Remove(filepath.Join(noStatus.Rootfs, "bin", "status")); err != nil {
		t.Fatal(err)
	}
	startGenerations(t, p,
		Spec{Network: "kte", Image: toolImage(t, "main"), Config: []byte(`{"name":"kte"}`)},
		Spec{Network: "kte2", Image: noStatus, Config: []byte(`{"name":"kte2"}`)})

	st := statusOf(p, "kte")
	if st.State != StateUnavailable || !strings.Contains(st.Reason, "uplink down") || !strings.Contains(st.Reason, "CNI error 50") || st.Pid == 0 {
		t.Fatalf("after a start whose status failed: %+v, want unavailable with the plugin's message", st)
	}
	err := p.Ready("kte", 0)
	var ne *netplugin.NetworkError
	if !errors.Is(err, netplugin.ErrUnavailable) || !errors.As(err, &ne) || ne.Network != "kte" || !strings.Contains(err.Error(), "uplink down") {
		t.Errorf("Ready = %v, want netplugin.ErrUnavailable naming kte and the message", err)
	}
	if out, _, err := p.Exec(context.Background(), testCall("kte", 0, "/bin/echo", nil, []byte("still served"))); err != nil || string(out) != "still served" {
		t.Errorf("Exec on an unavailable network: %q, %v; want it run", out, err)
	}
	if err := p.Ready("kte2", 0); err != nil || statusOf(p, "kte2").State != StateRunning {
		t.Errorf("an image without status: Ready %v, %+v", err, statusOf(p, "kte2"))
	}

	if err := os.Remove(notReady); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "kte running again", statusWhere(p, "kte", func(s Status) bool {
		return s.State == StateRunning && s.Reason == ""
	}))
	if err := p.Ready("kte", 0); err != nil {
		t.Errorf("Ready after status passed: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	var probes, echoes int
	for _, c := range calls {
		switch {
		case c.Network == "kte2" && c.Path == "/bin/status":
			t.Errorf("status asked of an image without it: %+v", c)
		case c.Path == "/bin/status":
			probes++
			if c.Pid != st.Pid || string(c.Stdin) != `{"name":"kte"}` {
				t.Errorf("probe %+v: want pid %d and the network's config on stdin", c, st.Pid)
			}
		case c.Path == "/bin/echo":
			echoes++
			if c.Err != nil || string(c.Stdout) != "still served" || c.Pid != st.Pid || c.Duration <= 0 {
				t.Errorf("OnCall of the echo: %+v", c)
			}
		}
	}
	if probes < 2 || echoes != 1 {
		t.Errorf("OnCall heard %d probes and %d echoes, want at least 2 and 1", probes, echoes)
	}
}

// TestProvides: an executable is found in the image's root filesystem, and
// symlinks resolve inside it, never on the host.
func TestProvides(t *testing.T) {
	p := newTestHost(t, nil)
	img := toolImage(t, "main")
	for name, target := range map[string]string{"inside": "/bin/echo", "outside": "/usr/bin/env", "dir": "/bin"} {
		if err := os.Symlink(target, filepath.Join(img.Rootfs, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	startGenerations(t, p, Spec{Network: "kte", Image: img, Config: []byte(`{"name":"kte"}`)})
	for path, want := range map[string]bool{
		"/bin/echo": true, "/bin/inside": true, "/bin/outside": false, "/bin/dir": false,
		"/opt/network/gc": false, "/bin/../bin/status": true,
	} {
		if got := p.Provides("kte", 0, path); got != want {
			t.Errorf("Provides(%s) = %v, want %v", path, got, want)
		}
	}
	if p.Provides("nosuch", 0, "/bin/echo") {
		t.Error("Provides of an unknown network")
	}
}
