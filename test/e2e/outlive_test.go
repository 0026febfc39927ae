package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// procStart is process pid's start time (clock ticks since boot, the 22nd
// field of /proc/<pid>/stat), "" when it is gone: with the pid, it names
// one process for good.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// sameProcess checks that a generation runs, after a restart of kurmad,
// the very main it ran before (pid and start time), not restarted.
func sameProcess(t *testing.T, what string, before api.Generation, beforeStart string, after api.Generation) {
	t.Helper()
	if after.Pid != before.Pid || procStart(after.Pid) != beforeStart || after.Restarts != before.Restarts {
		t.Errorf("%s: pid %d (started %q) restarts %d, want pid %d (started %q) restarts %d: the main must not be restarted",
			what, after.Pid, procStart(after.Pid), after.Restarts, before.Pid, beforeStart, before.Restarts)
	}
}

// TestPluginsOutliveKurmad: SIGTERM stops kurmad and leaves its plugin
// containers running; the next kurmad adopts them (same main processes,
// same generations), the pods attached before detach through them and new
// pods attach; a network whose definition changed while kurmad was down is
// replaced as a reload would (its old generation retires and stops after
// its last pod); --stop-plugins and SIGUSR2 stop everything, leaving no
// process, cgroup or mount.
func TestPluginsOutliveKurmad(t *testing.T) {
	e := newEnv(t)
	e.StopPlugins = false
	e.writeConfig(twoBridges(), nil)
	e.start()
	before := e.generations()
	starts := map[string]string{}
	for k, g := range before {
		if g.State != api.StateRunning || g.Pid == 0 {
			t.Fatalf("%s before the restart: %+v", k, g)
		}
		starts[k] = procStart(g.Pid)
	}
	p1 := e.createPod("--net", "a", "--net", "b")

	// SIGTERM: kurmad exits 0, its plugins' mains run on.
	e.stop()
	for k, g := range before {
		if procStart(g.Pid) != starts[k] {
			t.Errorf("%s: main %d gone after kurmad's SIGTERM", k, g.Pid)
		}
	}
	if n := e.pluginMains(); n != 2 {
		t.Errorf("%d plugin mains with kurmad stopped, want 2:\n%s", n, strings.Join(e.Processes(), "\n"))
	}

	// The next kurmad adopts them and serves through them.
	e.start()
	after := e.waitGenerations("the generations to be adopted", map[string]string{"a/1": "running", "b/1": "running"})
	for k := range before {
		sameProcess(t, k+" after a restart", before[k], starts[k], after[k])
	}
	if n := strings.Count(e.Log(), "adopted the container a kurmad before this one left running"); n != 2 {
		t.Errorf("kurmad logged %d adoptions, want 2", n)
	}
	p2 := e.createPod("--net", "a", "--net", "b")
	ping(t, p2.Netns, podIPs(t, p1)["a"])
	ping(t, p1.Netns, podIPs(t, p2)["b"])
	e.mustCtl("pod", "rm", p1.ID)
	p3 := e.createPod("--net", "a")
	ping(t, p3.Netns, podIPs(t, p2)["a"])
	e.mustCtl("pod", "rm", p2.ID)

	// a's definition changes while kurmad is down, with p3 on it: its new
	// generation serves new pods, the old one retires, running on (the
	// same main) for p3's delete, then stops.
	e.stop()
	a2 := bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	a2.Conf["mtu"] = 1400
	e.writeConfig([]netDef{a2, twoBridges()[1]}, nil)
	e.start()
	gens := e.waitGenerations("a's generation 2 to replace generation 1", map[string]string{
		"a/1": "retiring", "a/2": "running", "b/1": "running"})
	sameProcess(t, "a/1, retiring", before["a/1"], starts["a/1"], gens["a/1"])
	sameProcess(t, "b/1, unchanged", before["b/1"], starts["b/1"], gens["b/1"])
	if gens["a/2"].Pid == 0 || gens["a/2"].Pid == before["a/1"].Pid {
		t.Errorf("a/2 pid %d, want a new main", gens["a/2"].Pid)
	}
	p4 := e.createPod("--net", "a")
	ping(t, p4.Netns, podIPs(t, p3)["a"])
	e.mustCtl("pod", "rm", p3.ID)
	e.waitGenerations("a's generation 1 to stop after its last pod", map[string]string{"a/2": "running", "b/1": "running"})
	testutil.WaitFor(t, 10*time.Second, "a/1's main to end", func() error {
		if procStart(before["a/1"].Pid) == starts["a/1"] {
			return fmt.Errorf("main %d runs", before["a/1"].Pid)
		}
		return nil
	})
	e.mustCtl("pod", "rm", p4.ID)
	e.checkCleanLive()

	// --stop-plugins: SIGTERM stops the (adopted) containers too.
	e.StopPlugins = true
	e.start()
	e.stop()
	e.checkCleanStopped()

	// SIGUSR2, without the flag, as kurma-node's uninstall sends it.
	e.StopPlugins = false
	e.start()
	if err := syscall.Kill(e.Pid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	e.waitExit(45 * time.Second)
	if err := e.ExitErr(); err != nil {
		t.Errorf("kurmad exited with %v after SIGUSR2", err)
	}
	e.checkCleanStopped()
}
