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

// pluginMainPids lists the pids of the plugin mains of e's kurmad: those
// of the test image (cni-wrapper's setup) and of legacynet.
func (e *env) pluginMainPids() []string {
	var out []string
	for _, p := range e.Processes() {
		pid, cmd, _ := strings.Cut(p, ": ")
		if strings.HasPrefix(cmd, "/opt/network/setup") || strings.HasPrefix(cmd, "/opt/network/main") {
			out = append(out, strings.TrimPrefix(pid, "pid "))
		}
	}
	return out
}

// leasedAddress is the address pod p got on network, which must be want.
func leasedAddress(t *testing.T, p *api.Pod, network, want string) {
	t.Helper()
	if got := podIPs(t, p)[network]; got != want {
		t.Errorf("pod %s on %s: address %q, want %s: leased by the main's memory, counting on from the leases it handed out",
			p.ID, network, got, want)
	}
}

// TestPluginsOutliveKurmad: SIGTERM stops kurmad and leaves its plugin
// containers running; the next kurmad adopts them (same main processes,
// same generations, their output followed), the pods attached before
// detach through them and new pods attach. Network b's main keeps its
// pods' leases in memory alone (legacynet with a pool, as a DHCP daemon
// would): a new pod's lease counts on from those it handed out before the
// restart, and the del of a pod attached before it releases a lease main
// still holds (a main started anew would hand out the first address again
// and fail that del). A network whose definition changed while kurmad was
// down is replaced as a reload would (its old generation retires and
// stops after its last pod); --stop-plugins and SIGUSR2 stop everything,
// leaving no process, cgroup or mount.
func TestPluginsOutliveKurmad(t *testing.T) {
	e := newEnv(t)
	e.StopPlugins = false
	a := twoBridges()[0]
	b := netDef{Name: "b", Image: legacyImage(t, e.Dir), Conf: map[string]any{"pool": "10.205.0.0/24"}}
	e.writeConfig([]netDef{a, b}, nil)
	e.networks = []string{"a", "b"} // b has an image of its own: writeConfig leaves it out
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
	leasedAddress(t, p1, "b", "10.205.0.2")

	// SIGTERM: kurmad exits 0, its plugins' mains run on.
	e.stop()
	for k, g := range before {
		if procStart(g.Pid) != starts[k] {
			t.Errorf("%s: main %d gone after kurmad's SIGTERM", k, g.Pid)
		}
	}
	if mains := e.pluginMainPids(); len(mains) != 2 {
		t.Errorf("plugin mains %v with kurmad stopped, want 2:\n%s", mains, strings.Join(e.Processes(), "\n"))
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
	// It stopped cleanly and the journal is the one it left: the boot ran
	// no gc (pkg/daemon's cleanstop.go).
	if !strings.Contains(e.Log(), "gcSkipped=2") {
		var lines []string
		for _, l := range strings.Split(e.Log(), "\n") {
			if strings.Contains(l, "journal reconciled") {
				lines = append(lines, l)
			}
		}
		t.Errorf("the boot after a clean stop did not skip both networks' gcs:\n%s", strings.Join(lines, "\n"))
	}
	p2 := e.createPod("--net", "a", "--net", "b")
	leasedAddress(t, p2, "b", "10.205.0.3")
	ping(t, p2.Netns, podIPs(t, p1)["a"])
	ping(t, p1.Netns, podIPs(t, p2)["a"])
	// Its del asks b's main to release a lease handed out before the
	// restart; what main says reaches this kurmad's log.
	e.mustCtl("pod", "rm", p1.ID)
	released := "legacynet: released 10.205.0.2/24 of pod " + p1.ID
	testutil.WaitFor(t, 10*time.Second, "b's main to log its release", func() error {
		if err := e.SyncLog(5 * time.Second); err != nil {
			return err
		}
		if !strings.Contains(e.Log(), released) {
			return fmt.Errorf("no %q in kurmad's log", released)
		}
		return nil
	})
	p3 := e.createPod("--net", "a")
	ping(t, p3.Netns, podIPs(t, p2)["a"])

	// a's definition changes while kurmad is down, with p3 on it: its new
	// generation serves new pods, the old one retires, running on (the
	// same main) for p3's delete, then stops. b, unchanged, keeps its main
	// and its leases (p2's).
	e.stop()
	a2 := bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true)
	a2.Conf["mtu"] = 1400
	e.writeConfig([]netDef{a2, b}, nil)
	e.networks = []string{"a", "b"}
	e.start()
	gens := e.waitGenerations("a's generation 2 to replace generation 1", map[string]string{
		"a/1": "retiring", "a/2": "running", "b/1": "running"})
	sameProcess(t, "a/1, retiring", before["a/1"], starts["a/1"], gens["a/1"])
	sameProcess(t, "b/1, unchanged", before["b/1"], starts["b/1"], gens["b/1"])
	if gens["a/2"].Pid == 0 || gens["a/2"].Pid == before["a/1"].Pid {
		t.Errorf("a/2 pid %d, want a new main", gens["a/2"].Pid)
	}
	p4 := e.createPod("--net", "a", "--net", "b")
	leasedAddress(t, p4, "b", "10.205.0.4")
	ping(t, p4.Netns, podIPs(t, p3)["a"])
	e.mustCtl("pod", "rm", p2.ID) // b's lease of before both restarts
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
	e.stop()
	e.StopPlugins = true
	e.start()
	if n := strings.Count(e.Log(), "adopted the container a kurmad before this one left running"); n != 3*2 {
		t.Errorf("kurmad logged %d adoptions in all, want 6 (2 at each restart: a/1, retiring, and b/1 at the second)", n)
	}
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
