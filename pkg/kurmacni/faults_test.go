package kurmacni

// kurma-cni under a node's everyday faults (issue 19), at the API seam: a
// kurmad that accepts and never answers (a real unix socket), a socket
// path that is missing, stale or no socket, and the config quirks runtimes
// send. The real kurmad under SIGSTOP, and a socket refusing the caller,
// are tested end to end in test/e2e (TestKurmaCNIHungKurmad,
// TestKurmaCNISocketRefused).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// hungKurmad is a unix socket that accepts connections and never
// answers, as a stopped or deadlocked kurmad's; it returns its path.
func hungKurmad(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "khung")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kurmad.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return sock
}

// minimalResult is a prevResult for a CHECK that never gets to compare
// it (kurmad does not answer).
var minimalResult = map[string]any{"cniVersion": "1.1.0", "interfaces": []any{}, "ips": []any{}}

// TestDeadlines: against a kurmad that never answers, every verb gives up
// at its deadline ("timeout"; STATUS at most StatusTimeout) with "try
// again later" naming kurmad's socket and the deadline.
func TestDeadlines(t *testing.T) {
	sock := hungKurmad(t)
	const limit = 300 * time.Millisecond
	c := conf("1.1.0", sock, "mynet", map[string]any{"timeout": limit.String()})
	p := newPlugin(io.Discard)
	verbs := map[string]func(*skel.CmdArgs) error{"ADD": p.Add, "DEL": p.Del, "CHECK": p.Check, "GC": p.GC, "STATUS": p.Status}
	for verb, fn := range verbs {
		t.Run(verb, func(t *testing.T) {
			stdin := c
			if verb == "CHECK" {
				stdin = conf("1.1.0", sock, "mynet", map[string]any{"timeout": limit.String(), "prevResult": minimalResult})
			}
			if verb == "GC" {
				stdin = conf("1.1.0", sock, "mynet", map[string]any{"timeout": limit.String(), "cni.dev/valid-attachments": []any{}})
			}
			start := time.Now()
			err := fn(cmdArgs(stdin, "hung", "eth0"))
			took := time.Since(start)
			checkCNIError(t, err, types.ErrTryAgainLater, "kurmad at "+sock+" did not answer within 300ms")
			if took < limit || took > limit+2*time.Second {
				t.Errorf("%s answered after %v, want at its deadline %v", verb, took, limit)
			}
		})
	}
}

// TestDeadlineOf: ADD, DEL, CHECK and GC wait "timeout" (DefaultTimeout,
// under the CRI's 2 minutes, without one); STATUS never more than
// StatusTimeout.
func TestDeadlineOf(t *testing.T) {
	for _, tt := range []struct {
		timeout string
		verb    string
		want    time.Duration
	}{
		{"", "ADD", DefaultTimeout}, {"", "DEL", DefaultTimeout}, {"", "STATUS", StatusTimeout},
		{"10m", "GC", 10 * time.Minute}, {"10m", "STATUS", StatusTimeout}, {"2s", "STATUS", 2 * time.Second},
	} {
		extra := map[string]any{}
		if tt.timeout != "" {
			extra["timeout"] = tt.timeout
		}
		c, e := parseConf(conf("1.1.0", "/run/k.sock", "mynet", extra))
		if e != nil {
			t.Fatal(e)
		}
		if got := deadline(c, tt.verb); got != tt.want {
			t.Errorf("timeout %q: %s waits %v, want %v", tt.timeout, tt.verb, got, tt.want)
		}
	}
	if DefaultTimeout >= 2*time.Minute {
		t.Errorf("DefaultTimeout %v is not under the CRI's 2 minutes", DefaultTimeout)
	}
	for _, bad := range []any{"soon", "0s", "-1s", 30} {
		_, e := parseConf(conf("1.1.0", "/run/k.sock", "mynet", map[string]any{"timeout": bad}))
		checkCNIError(t, e, types.ErrInvalidNetworkConfig, `"timeout"`)
	}
}

// TestSocketFaults: a socket path that cannot be one is a permanent error
// (7) naming the fix, at once; a missing socket or one nobody listens on
// is "try again later" in words go-cni's "not found" matching cannot
// swallow.
func TestSocketFaults(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	for _, tt := range []struct {
		name, sock string
		code       uint
		msg        string
	}{
		{"missing", filepath.Join(dir, "gone.sock"), types.ErrTryAgainLater, "does not exist: kurmad is not running"},
		{"stale", stale, types.ErrTryAgainLater, "nothing listens on kurmad's API socket"},
		{"a file", file, types.ErrInvalidNetworkConfig, "is not a unix socket"},
		{"a directory", dir, types.ErrInvalidNetworkConfig, "is not a unix socket"},
		{"under a file", filepath.Join(file, "kurmad.sock"), types.ErrInvalidNetworkConfig, "is not a unix socket"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(io.Discard)
			c := conf("1.1.0", tt.sock, "mynet", map[string]any{"prevResult": minimalResult})
			for verb, fn := range map[string]func(*skel.CmdArgs) error{"ADD": p.Add, "DEL": p.Del, "CHECK": p.Check} {
				start := time.Now()
				err := fn(cmdArgs(c, "sockctr", "eth0"))
				checkCNIError(t, err, tt.code, tt.msg)
				if err != nil && (strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "no such file or directory")) {
					t.Errorf("%s: %q reads like go-cni's \"already deleted\"", verb, err)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("%s took %v, want an answer at once", verb, d)
				}
			}
		})
	}
}

// TestDelIgnoresPrevResult: DEL and GC never read prevResult (a runtime
// may send one of any shape); ADD fails on one it cannot read (6).
func TestDelIgnoresPrevResult(t *testing.T) {
	sock, _ := serve(t)
	p := newPlugin(io.Discard)
	for _, prev := range []any{"garbage", map[string]any{"cniVersion": "9.9.9", "ips": 5}} {
		c := conf("1.0.0", sock, "mynet", map[string]any{"prevResult": prev})
		if err := p.Del(cmdArgs(c, "prevctr", "eth0")); err != nil {
			t.Errorf("DEL with prevResult %v: %v", prev, err)
		}
		var e *types.Error
		if err := p.Add(cmdArgs(c, "prevctr", "eth0")); !errors.As(err, &e) || e.Code != types.ErrDecodingFailure {
			t.Errorf("ADD with prevResult %v: %v, want code 6", prev, err)
		}
	}
}

// TestNullCapabilities: a capability argument the runtime passed as null
// is dropped as if absent; the others reach kurmad.
func TestNullCapabilities(t *testing.T) {
	sock, b := serve(t)
	rc := map[string]any{"mac": nil, "portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80}}}
	if err := newPlugin(io.Discard).Add(cmdArgs(conf("1.0.0", sock, "mynet", map[string]any{"runtimeConfig": rc}), "nullcap", "eth0")); err != nil {
		t.Fatal(err)
	}
	got := b.Created()[len(b.Created())-1].RuntimeConfig["mynet"]
	if _, ok := got["mac"]; ok || len(got["portMappings"]) == 0 {
		t.Errorf("capability arguments reaching kurmad: %v, want portMappings alone", got)
	}
}

// TestGCScope: a GC without cni.dev/valid-attachments releases nothing
// and says so; one with a list (null or empty: none valid) releases only
// the calling runtime's attachments on its CNI network name.
func TestGCScope(t *testing.T) {
	sock, b := serve(t)
	mine, theirs := newPlugin(io.Discard), &Plugin{Stdout: io.Discard, Caller: func() string { return "otherrt" }}
	add := func(p *Plugin, network, ctr string) {
		t.Helper()
		c := conf("1.1.0", sock, "mynet", map[string]any{"name": network})
		if err := p.Add(cmdArgs(c, ctr, "eth0")); err != nil {
			t.Fatal(err)
		}
	}
	add(mine, "ktcni", "m1")
	add(mine, "ktcni", "m2")
	add(theirs, "ktcni", "t1")
	add(mine, "ktother", "o1")
	left := func() []string {
		pods, _ := b.ListPods(context.Background())
		var ids []string
		for _, p := range pods {
			ids = append(ids, p.Runtime.ContainerID)
		}
		return ids
	}

	var stderr bytes.Buffer
	mine.Stderr = &stderr
	if err := mine.GC(&skel.CmdArgs{StdinData: conf("1.1.0", sock, "mynet", map[string]any{"name": "ktcni"})}); err != nil {
		t.Fatal(err)
	}
	if got := left(); len(got) != 4 || !strings.Contains(stderr.String(), "nothing released") {
		t.Errorf("after a GC without a list: %v, stderr %q; want all four and a note", got, stderr.String())
	}

	gc := conf("1.1.0", sock, "mynet", map[string]any{"name": "ktcni",
		"cni.dev/valid-attachments": []map[string]string{{"containerID": "m1", "ifname": "eth0"}}})
	if err := mine.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(left(), " "); got != "m1 t1 o1" {
		t.Errorf("after GC of ktcni keeping m1: %s, want m1 t1 o1", got)
	}
	if err := mine.GC(&skel.CmdArgs{StdinData: conf("1.1.0", sock, "mynet", map[string]any{"name": "ktcni", "cni.dev/valid-attachments": nil})}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(left(), " "); got != "t1 o1" {
		t.Errorf("after GC of ktcni with a null list: %s, want t1 o1 (another runtime's, another name's)", got)
	}
}
