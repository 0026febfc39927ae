package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// TestCreateRollback: the second network's add fails in several ways; the
// first network is deleted again, the netns is gone, the error names the
// failing network and carries the plugin's message, and the daemon goes on.
func TestCreateRollback(t *testing.T) {
	e := newEnv(t)
	badRange := bridgeNet("badrange", "kt-e2e1", "10.205.0.0/16", "", false)
	badRange.Conf["ipam"].(map[string]any)["rangeStart"] = "10.99.0.1"
	e.writeConfig([]netDef{
		bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true),
		cnitestNet("fail", "fail"),
		cnitestNet("crash", "crash-after-veth"),
		badRange,
	}, nil)
	e.start()

	for _, tc := range []struct {
		network string
		want    []string // in kurmactl's stderr
	}{
		{"fail", []string{`network "fail"`, "cnitest: told to fail"}},
		{"crash", []string{`network "crash"`, "crashing after creating the veth"}},
		{"badrange", []string{`network "badrange"`, "10.99.0.1"}},
	} {
		t.Run(tc.network, func(t *testing.T) {
			out, errOut, err := e.ctl("pod", "create", "-o", "json", "--net", "a", "--net", tc.network)
			if err == nil {
				t.Fatalf("pod create with %s succeeded: %s", tc.network, out)
			}
			if out != "" {
				t.Errorf("stdout on failure: %q", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q: %s", w, errOut)
				}
			}
			e.checkCleanLive()
		})
	}
	// Still fine: a pod on the good network.
	p := e.createPod("--net", "a")
	e.mustCtl("pod", "rm", p.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestPluginTimeout: a plugin that hangs (with a child holding its stdout,
// in its process group or detached) fails the create with the 504
// plugin_timeout error after plugin_timeout, is rolled back, leaves no
// process, and the daemon still serves, the same network included.
func TestPluginTimeout(t *testing.T) {
	e := newEnv(t)
	e.writeConfig([]netDef{
		bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true),
		cnitestNet("hang", "hang"),
		cnitestNet("hangd", "hang-detached"),
	}, map[string]any{"plugin_timeout": "2s"})
	e.start()

	for _, nw := range []string{"hang", "hangd"} {
		t.Run(nw, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := e.Client.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"a", nw}})
			took := time.Since(start)
			var aerr *api.Error
			if !errors.As(err, &aerr) {
				t.Fatalf("create: %v (%T), want an *api.Error", err, err)
			}
			if aerr.Status != http.StatusGatewayTimeout || aerr.Code != "plugin_timeout" {
				t.Errorf("create error status %d code %q, want 504 plugin_timeout: %s", aerr.Status, aerr.Code, aerr.Message)
			}
			if !strings.Contains(aerr.Message, `network "`+nw+`"`) || !strings.Contains(aerr.Message, "timed out after 2s") {
				t.Errorf("message %q should name the network and the limit", aerr.Message)
			}
			if took < 2*time.Second || took > 15*time.Second {
				t.Errorf("create took %v with plugin_timeout 2s", took)
			}
			// kurmactl shows the same as a non-zero exit.
			_, errOut, cerr := e.ctl("pod", "create", "--net", nw)
			if cerr == nil || !strings.Contains(errOut, "timed out") {
				t.Errorf("kurmactl pod create --net %s: %v, stderr %q", nw, cerr, errOut)
			}
			e.checkCleanLive()
			// The child must have run, or the check below proves nothing.
			if _, err := os.Stat(filepath.Join(e.StateDir, "networks", nw, "cnitest-hang-child-started")); err != nil {
				t.Fatalf("the hanging plugin's child never started: %v", err)
			}
			// The agent kills the call's processes; give SIGKILL a moment.
			err = testutil.Poll(context.Background(), 3*time.Second, "the hanging plugin's processes to end", func() error {
				var left []string
				for _, p := range e.Processes() {
					if strings.Contains(p, "hang-child") {
						left = append(left, p+" "+procInfo(p))
					}
				}
				if len(left) > 0 {
					return fmt.Errorf("left after the timeout: %s", strings.Join(left, "; "))
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			// The timed-out call did not break the network: the next
			// create on it (told by its BEHAVIOR argument not to hang)
			// succeeds at once.
			start = time.Now()
			p := e.createPod("--net", nw+":BEHAVIOR=ok")
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("create on %s after its timeout took %v", nw, took)
			}
			if len(p.Attachments) != 1 || p.Attachments[0].Network != nw {
				t.Errorf("pod on %s after the timeout: %+v", nw, p)
			}
			e.mustCtl("pod", "rm", p.ID)
			e.checkCleanLive()
		})
	}
	p := e.createPod()
	e.mustCtl("pod", "rm", p.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// procInfo describes "pid N: ..." for a failure message: its state, parent,
// process group and session from /proc/<pid>/stat.
func procInfo(desc string) string {
	var pid int
	if _, err := fmt.Sscanf(desc, "pid %d:", &pid); err != nil {
		return ""
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "(gone)"
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 4 {
		return ""
	}
	var fds []string
	for fd := 0; fd <= 2; fd++ {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		fds = append(fds, l)
	}
	parent, _ := os.ReadFile("/proc/" + f[1] + "/cmdline")
	return fmt.Sprintf("[state %s ppid %s (%s) pgid %s sid %s fds 0-2 %v]", f[0], f[1],
		strings.ReplaceAll(strings.TrimRight(string(parent), "\x00"), "\x00", " "), f[2], f[3], fds)
}
