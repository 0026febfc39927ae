package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/api"
)

// TestPodCheck: pod check prints each network's outcome and exits 1 when a
// pod is degraded; pod ls and pod inspect then say degraded with the
// plugin's message, and ready again once the check passes.
func TestPodCheck(t *testing.T) {
	sock, b := serve(t)
	var p api.Pod
	if err := json.Unmarshal([]byte(mustRun(t, sock, "pod", "create", "--name", "web", "--net", "mynet", "--net", "other", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, sock, "pod", "check", "web")
	if got := header(out); !slices.Equal(got, []string{"POD", "NETWORK", "INTERFACE", "OUTCOME", "MESSAGE"}) {
		t.Errorf("pod check columns %q\n%s", got, out)
	}
	if strings.Count(out, "passed") != 2 {
		t.Errorf("pod check:\n%s", out)
	}

	b.BreakCheck(p.ID, "other", "eth1 is gone")
	out, errOut, code := kurmactl(t, sock, "pod", "check", p.ID[:8])
	if code != 1 || !strings.Contains(out, "failed") || !strings.Contains(out, "eth1 is gone") || errOut != "" {
		t.Errorf("pod check of a broken pod: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if out := mustRun(t, sock, "pod", "ls"); !strings.Contains(out, "degraded: other: eth1 is gone") {
		t.Errorf("pod ls of a degraded pod:\n%s", out)
	}
	if out := mustRun(t, sock, "pod", "inspect", "web"); !strings.Contains(out, "Check:    degraded at ") || !strings.Contains(out, "(other: eth1 is gone)") {
		t.Errorf("pod inspect of a degraded pod:\n%s", out)
	}
	out, _, code = kurmactl(t, sock, "pod", "check", "web", "-o", "json")
	var pods []api.Pod
	if err := json.Unmarshal([]byte(out), &pods); err != nil || code != 1 || len(pods) != 1 || pods[0].Check == nil || !pods[0].Check.Degraded {
		t.Errorf("pod check -o json: exit %d %v\n%s", code, err, out)
	}

	b.BreakCheck(p.ID, "other", "")
	mustRun(t, sock, "pod", "check", "web")
	if out := mustRun(t, sock, "pod", "ls"); strings.Contains(out, "degraded") || !strings.Contains(out, "ready") {
		t.Errorf("pod ls after the check passed:\n%s", out)
	}
	if _, errOut, code := kurmactl(t, sock, "pod", "check", "nosuch"); code != 1 || !strings.Contains(errOut, "kurmactl: pod nosuch:") {
		t.Errorf("pod check of an unknown pod: exit %d stderr %q", code, errOut)
	}
}

// TestInspectCalls: --calls prints each kept call with its argv and the
// stdin as kept, --net one network's, -o json the list.
func TestInspectCalls(t *testing.T) {
	sock, _ := serve(t)
	var p api.Pod
	if err := json.Unmarshal([]byte(mustRun(t, sock, "pod", "create", "--name", "two", "--net", "other", "--net", "mynet", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, sock, "pod", "inspect", "two", "--calls")
	for _, want := range []string{
		"== other add at ", ": exit 0 in 12.5 ms (container pid 1001, in-process)\n",
		"argv: /opt/network/add /run/kurma/netns/" + p.ID + " " + p.ID + " eth0\n",
		"stdin:\n" + `{"name":"other","type":"bridge","password":"[redacted]"}` + "\n",
		"stdout:\n{\"cniVersion\":\"1.1.0\"}\n", "stderr:\nplugin says hi\n", "== mynet add at ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--calls lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "== other") > strings.Index(out, "== mynet") {
		t.Errorf("--calls not oldest first:\n%s", out)
	}
	if out := mustRun(t, sock, "pod", "inspect", "two", "--calls", "--net", "mynet"); strings.Contains(out, "other") {
		t.Errorf("--calls --net mynet shows other:\n%s", out)
	}
	var calls []api.PluginCall
	if err := json.Unmarshal([]byte(mustRun(t, sock, "pod", "inspect", "two", "--calls", "-o", "json")), &calls); err != nil || len(calls) != 2 {
		t.Errorf("--calls -o json: %v %+v", err, calls)
	}
	for _, args := range [][]string{{"--raw", "--calls"}, {"--net", "mynet"}} {
		if _, errOut, code := kurmactl(t, sock, append([]string{"pod", "inspect", "two"}, args...)...); code != 1 || !strings.Contains(errOut, "Run 'kurmactl --help'") {
			t.Errorf("pod inspect %v: exit %d stderr %q, want a usage error", args, code, errOut)
		}
	}
}
