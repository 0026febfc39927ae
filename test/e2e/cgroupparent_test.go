package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// TestTwoKurmadsOneCgroupParent: two kurmads on this kernel with run dirs
// of their own and the same cgroup_parent (as two nodes of a test cluster
// that share a cgroup namespace): neither kills the other's plugin
// containers, not at boot after a kill -9 (its cleanup of what it left)
// nor when a container of its own starts. A network whose container's
// cgroup the other kurmad's container holds does not start, and says so
// naming cgroup_parent; each kurmad adopts its own containers after its
// kill -9 (the same mains), and only its own.
func TestTwoKurmadsOneCgroupParent(t *testing.T) {
	const parent = "kt-e2e-cgparent"
	a, b := newEnv(t), newEnv(t)
	a.CgroupParent, b.CgroupParent = parent, parent
	extra := map[string]any{"cgroup_parent": parent}
	shared := bridgeNet("ktshared", "kt-e2e0", "10.230.0.0/16", "", true)
	other := bridgeNet("ktother", "kt-e2e1", "10.231.0.0/16", "", true)

	a.writeConfig([]netDef{shared}, extra)
	a.start()
	var aShared api.Generation
	testutil.WaitFor(t, 30*time.Second, "A's ktshared running", func() error { return a.networkIn("ktshared", "running", &aShared) })

	// B runs ktother, and a ktshared of its own: same container name,
	// same cgroup, held by A's.
	b.writeConfig([]netDef{other, shared}, extra)
	b.networks = []string{"ktother"}
	b.start()
	var bShared api.Generation
	testutil.WaitFor(t, 30*time.Second, "B's ktshared refused", func() error {
		g, err := b.network("ktshared")
		if err == nil && (g.State != "failed" || !strings.Contains(g.Reason, "cgroup_parent") || !strings.Contains(g.Reason, "did not start")) {
			return fmt.Errorf("B's ktshared is %s: %q", g.State, g.Reason)
		}
		bShared = g
		return err
	})
	t.Logf("B's ktshared: %s", bShared.Reason)
	alive(t, "A's ktshared main, B's ktshared refused", aShared.Pid)
	a.createPod("--name", "a1", "--net", "ktshared")

	// B without ktshared; then B dies and boots again: its cleanup leaves
	// A's container alone.
	b.stop()
	b.writeConfig([]netDef{other}, extra)
	b.start()
	var bOther api.Generation
	testutil.WaitFor(t, 30*time.Second, "B's ktother running", func() error { return b.networkIn("ktother", "running", &bOther) })
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	b.start()
	alive(t, "A's ktshared main, after B's kill -9 and boot", aShared.Pid)
	adopted(t, b, "B's ktother", bOther)

	// A dies and boots again: it adopts its own ktshared and leaves B's
	// ktother.

	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	a.start()
	alive(t, "B's ktother main, after A's kill -9 and boot", bOther.Pid)
	adopted(t, a, "A's ktshared", aShared)
	a.createPod("--name", "a2", "--net", "ktshared")
	b.createPod("--name", "b1", "--net", "ktother")

	for _, e := range []*env{a, b} {
		if err := e.RemoveAllPods(context.Background()); err != nil {
			t.Error(err)
		}
	}
	a.stop()
	alive(t, "B's ktother main, after A's stop", bOther.Pid)
	b.stop()
	for _, d := range b.CgroupDirs() {
		t.Errorf("cgroup left behind under the shared parent: %s", d)
	}
}

// adopted checks that e's kurmad, booted after a kill -9, runs the
// generation it ran before with the same main (pid and start).
func adopted(t *testing.T, e *env, what string, before api.Generation) {
	t.Helper()
	start := procStart(before.Pid)
	var now api.Generation
	testutil.WaitFor(t, 30*time.Second, what+" running", func() error { return e.networkIn(before.Network, "running", &now) })
	sameProcess(t, what+", adopted", before, start, now)
}

func alive(t *testing.T, what string, pid int) {
	t.Helper()
	if pid <= 0 || !processAlive(pid) {
		t.Errorf("%s: process %d is gone", what, pid)
	}
}

// processAlive reports whether pid runs (a zombie does not count).
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if pid <= 0 || err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
