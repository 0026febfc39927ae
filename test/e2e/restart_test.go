package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// pluginMains counts the processes in this env's plugin cgroups running a
// network's main (/opt/network/setup).
func (e *env) pluginMains() int {
	n := 0
	for _, p := range e.Processes() {
		// "pid N: /opt/network/setup": the main itself, not its init (the
		// agent, whose command line ends with the main's).
		if _, cmd, _ := strings.Cut(p, ": "); strings.HasPrefix(cmd, "/opt/network/setup") {
			n++
		}
	}
	return n
}

// TestRestartAdoptsPods: kill -9 kurmad with pods, start it again on the
// same dirs: the pods are listed and still work, the killed kurmad's
// plugin containers are adopted (the same mains, not duplicated), and pod
// rm cleans everything.
func TestRestartAdoptsPods(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(twoBridges(), nil)
	e.start()
	p1 := e.createPod("--name", "kte-r1")
	p2 := e.createPod("--name", "kte-r2", "--net", "a", "--net", "b")
	before := e.generations()
	starts := map[string]string{}
	for k, g := range before {
		starts[k] = procStart(g.Pid)
	}
	if err := e.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p1.Netns); err != nil {
		t.Fatalf("netns gone after kill -9: %v", err)
	}

	e.start()
	table := e.mustCtl("pod", "ls")
	for _, p := range []string{p1.ID, p2.ID} {
		if !strings.Contains(table, p[:8]) {
			t.Errorf("pod ls after restart does not show %s:\n%s", p, table)
		}
	}
	pods := e.listPods()
	var ids []string
	for _, p := range pods {
		ids = append(ids, p.ID)
	}
	want := []string{p1.ID, p2.ID}
	sort.Strings(ids)
	sort.Strings(want)
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("pod ls after restart: %v, want %v", ids, want)
	}
	for _, p := range pods {
		if p.ID == p2.ID {
			if got, wantIP := podIPs(t, &p)["b"], podIPs(t, p2)["b"]; got != wantIP {
				t.Errorf("pod %s network b address %q after restart, want %q", p.ID, got, wantIP)
			}
		}
	}
	// The adopted pods still reach each other.
	ping(t, p1.Netns, podIPs(t, p2)["a"])
	// One plugin main per network: the killed daemon's, adopted (its
	// adoption records were written once they served).
	after := e.generations()
	for k := range before {
		sameProcess(t, k+" after kill -9", before[k], starts[k], after[k])
	}
	testutil.WaitFor(t, 5*time.Second, "one plugin main per network", func() error {
		if n := e.pluginMains(); n != 2 {
			return fmt.Errorf("%d plugin main processes, want 2:\n%s", n, strings.Join(e.Processes(), "\n"))
		}
		return nil
	})
	// A new pod is created beside the adopted ones.
	p3 := e.createPod()
	ping(t, p3.Netns, podIPs(t, p1)["a"])

	e.mustCtl("pod", "rm", p1.ID, p2.ID, p3.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestCrashPoints kills kurmad (KURMA_FAILPOINT) at every point podnet
// defines inside a create and a delete, restarts it, and checks that each
// pod is either whole or fully gone, and that nothing is left once the
// listed pods are deleted. Boots are chained: the daemon that checks one
// crash carries the next create failpoint (those never fire at boot).
func TestCrashPoints(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(twoBridges(), nil)
	// Every create failpoint, for the first network (nothing attached
	// before it) and for the second (a attached before it).
	createPoints := []string{
		"netns-before-intent", "after-pod-intent", "after-netns",
		"after-attach-intent:a", "after-add:a", "before-done:a",
		"after-attach-intent:b", "after-add:b", "before-done:b",
		"before-ready",
	}
	crashCreate := func(fp string) {
		t.Helper()
		out, errOut, err := e.ctl("pod", "create", "-o", "json", "--net", "a", "--net", "b")
		if err == nil {
			t.Fatalf("failpoint %s: create succeeded: %s", fp, out)
		}
		e.waitExit(20 * time.Second)
		if !strings.Contains(e.Log(), "failpoint "+fp+" reached") {
			t.Fatalf("failpoint %s not reached (kurmactl: %s)", fp, errOut)
		}
	}
	crashDelete := func(fp, id string) {
		t.Helper()
		if _, _, err := e.ctl("pod", "rm", id); err == nil {
			t.Fatalf("failpoint %s: pod rm succeeded", fp)
		}
		e.waitExit(20 * time.Second)
		if !strings.Contains(e.Log(), "failpoint "+fp+" reached") {
			t.Fatalf("failpoint %s not reached", fp)
		}
	}
	// The daemon that checks one crash carries the next failpoint: create
	// failpoints never fire at boot (Reconcile creates nothing).
	e.start("KURMA_FAILPOINT=" + createPoints[0])
	crashCreate(createPoints[0])
	for i := 1; i < len(createPoints); i++ {
		e.start("KURMA_FAILPOINT=" + createPoints[i])
		e.checkWholeOrGone(createPoints[i-1], "a", "b")
		crashCreate(createPoints[i])
	}
	// after-delete-intent fires in Delete only, not in Reconcile either.
	e.start("KURMA_FAILPOINT=after-delete-intent")
	e.checkWholeOrGone(createPoints[len(createPoints)-1], "a", "b")
	p := e.createPod("--net", "a", "--net", "b")
	crashDelete("after-delete-intent", p.ID)

	// after-del fires in every teardown, Reconcile's too: boot clean, make a
	// ready pod, kill -9, boot with the failpoint (the pod is adopted, no
	// teardown), remove it.
	e.start()
	e.checkWholeOrGone("after-delete-intent", "a", "b")
	p = e.createPod("--net", "a", "--net", "b")
	if err := e.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start("KURMA_FAILPOINT=after-del:b")
	crashDelete("after-del:b", p.ID)
	e.start()
	e.checkWholeOrGone("after-del:b", "a", "b")
	e.stop()
	e.checkCleanStopped()
}

// checkWholeOrGone checks that every listed pod is whole (netns present,
// each network attached with an address and its interface in the netns),
// deletes them, and checks that nothing is left.
func (e *env) checkWholeOrGone(label string, nets ...string) {
	e.t.Helper()
	t := e.t
	for _, p := range e.listPods() {
		t.Logf("%s: pod %s listed after restart (error %q)", label, p.ID, p.Error)
		if p.Error != "" {
			t.Errorf("%s: pod %s listed with error %q", label, p.ID, p.Error)
		}
		if _, err := os.Stat(p.Netns); err != nil {
			t.Errorf("%s: listed pod %s has no netns: %v", label, p.ID, err)
			continue
		}
		var got []string
		for _, a := range p.Attachments {
			got = append(got, a.Network)
		}
		if strings.Join(got, ",") != strings.Join(nets, ",") {
			t.Errorf("%s: listed pod %s has networks %v, want %v", label, p.ID, got, nets)
		}
		ips := podIPs(t, &p)
		links := "," + strings.Join(linksIn(t, p.Netns), ",") + ","
		for _, a := range p.Attachments {
			if ips[a.Network] == "" {
				t.Errorf("%s: listed pod %s network %s has no address: %s", label, p.ID, a.Network, a.Result)
			}
			if !strings.Contains(links, ","+a.Interface+",") {
				t.Errorf("%s: listed pod %s lacks interface %s", label, p.ID, a.Interface)
			}
		}
		e.mustCtl("pod", "rm", p.ID)
	}
	e.checkCleanLive()
}
