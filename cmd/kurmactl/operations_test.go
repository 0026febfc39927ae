package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// TestReload: a table of what changed, or the result as JSON; a config
// with problems prints them all and exits 2.
func TestReload(t *testing.T) {
	sock, b := serve(t)
	out := mustRun(t, sock, "reload")
	if got := header(out); !slices.Equal(got, []string{"NETWORK", "CHANGE"}) {
		t.Errorf("reload columns %q\n%s", got, out)
	}
	if !strings.Contains(out, "mynet") || !strings.Contains(out, "unchanged") {
		t.Errorf("reload:\n%s", out)
	}
	var res api.ReloadResult
	if err := json.Unmarshal([]byte(mustRun(t, sock, "reload", "-o", "json")), &res); err != nil || len(res.Unchanged) != 3 || res.Config == "" {
		t.Errorf("reload -o json = %+v, %v", res, err)
	}
	b.Hook = func(method, _ string) error {
		if method == "Reload" {
			return api.Errorf(api.CodeInvalidConfig, "config /etc/kurma/kurmad.json has 2 problem(s); nothing changed:\n  a: x\n  b: y")
		}
		return nil
	}
	out, errOut, code := kurmactl(t, sock, "reload")
	if code != 2 || out != "" || errOut != "kurmactl: config /etc/kurma/kurmad.json has 2 problem(s); nothing changed:\n  a: x\n  b: y\n" {
		t.Errorf("invalid config: exit %d stdout %q stderr %q", code, out, errOut)
	}
}

// TestNetRetryAndNextAttempt: net ls says when a failed network is tried
// again; net retry tries it now and prints its generations.
func TestNetRetryAndNextAttempt(t *testing.T) {
	sock, b := serve(t)
	b.SetGeneration(api.Generation{Network: "broken", Generation: 2, State: api.StateFailed, Reason: "registry down",
		NextRetry: time.Now().Add(90 * time.Second)})
	out := mustRun(t, sock, "net", "ls")
	if !regexp.MustCompile(`broken +2 +failed .*registry down \(next attempt in 1m(29|30)s\)`).MatchString(out) {
		t.Errorf("net ls:\n%s", out)
	}
	out = mustRun(t, sock, "net", "retry", "broken")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "fetching") {
		t.Errorf("net retry:\n%s", out)
	}
	_, errOut, code := kurmactl(t, sock, "net", "retry", "nope")
	if code != 1 || errOut != "kurmactl: unknown network \"nope\"\n" {
		t.Errorf("net retry nope: exit %d stderr %q", code, errOut)
	}
}

// TestPodRmForce: each del that did not succeed is named on stderr; the
// pod is removed and the exit status is 0.
func TestPodRmForce(t *testing.T) {
	sock, b := serve(t)
	id := checkPodJSON(t, mustRun(t, sock, "pod", "create", "--name", "stuck", "-o", "json"), "mynet")
	b.SetPodError(id, `network "mynet": /opt/network/del: exited with code 1`)
	out, errOut, code := kurmactl(t, sock, "pod", "rm", "--force", "stuck")
	if code != 0 || out != id+"\n" {
		t.Errorf("exit %d stdout %q", code, out)
	}
	want := "kurmactl: pod " + id + ": network mynet (eth0): del did not succeed, what it made may be left: " +
		`network "mynet": /opt/network/del: exited with code 1` + "\n"
	if errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	if out := mustRun(t, sock, "pod", "ls", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("pods after rm --force: %s", out)
	}
}
