package networkpod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// TestAdoptedAgentStillNamesItsContainer: calls, each started by the agent
// on a thread that enters the call's view and ends with it, leave the
// agent's process mount namespace (its main thread's: what
// /proc/<agent>/ns/mnt names, what the next kurmad copies its views from)
// the container's. A gc call's view holds the host's netns dir whole:
// copied from such a view, the next Host's gc views would stack a
// read-only copy of the netns dir on the host's, and no pod's netns could
// be made or removed there (issue 39's TestCrashPoints failure).
func TestAdoptedAgentStillNamesItsContainer(t *testing.T) {
	p1 := newTestHost(t, nil)
	spec := Spec{Network: "ktav", Image: toolImage(t, "main")}
	startGenerations(t, p1, spec)
	pod := newNetns(t, p1.NetnsDir(), "ktav-pod")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Many view threads: each may be the agent's main thread, were
	// anything in the agent to let it run one.
	for range 30 {
		_, _, _ = p1.Exec(ctx, testCall("ktav", 0, netplugin.GCPath, nil, nil)) // no gc in the image: the view is made all the same
		if out, _, err := p1.Exec(ctx, testCall("ktav", 0, "/bin/echo", []string{pod}, []byte("x"))); err != nil || string(out) != "x" {
			t.Fatalf("exec with the pod's netns: %q %v", out, err)
		}
	}
	n, _ := p1.lookup("ktav", 0)
	inst, err := n.running()
	if err != nil {
		t.Fatal(err)
	}
	agentNs, mainNs := mountNamespaceOf(t, inst.agentPid), mountNamespaceOf(t, inst.pid)
	if agentNs != mainNs {
		t.Errorf("agent %d's mount namespace is %s after its calls, its container's (the main %d's) %s", inst.agentPid, agentNs, inst.pid, mainNs)
	}
	if err := p1.Detach(ctx); err != nil {
		t.Fatal(err)
	}

	p2, err := New(p1.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = netnsfile.Remove(pod)
		if err := p2.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		assertNothingLeft(t, p2)
	})
	startGenerations(t, p2, spec)
	if st := statusOf(p2, "ktav"); st.State != StateRunning || st.Pid != inst.pid {
		t.Fatalf("ktav = %+v, want the main %d adopted", st, inst.pid)
	}
	for range 3 {
		_, _, _ = p2.Exec(ctx, testCall("ktav", 0, netplugin.GCPath, nil, nil))
	}
	// The host's netns dir is its own bind mount, the pod's netns, and
	// nothing else: a pod can be made there and removed.
	dir := p2.NetnsDir()
	points, err := mountPointsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	var onDir int
	for _, pt := range points {
		if pt == dir {
			onDir++
		}
	}
	if onDir != 1 {
		t.Errorf("%d mounts on the netns dir %s after the adopted container's gc calls, want 1:\n%s", onDir, dir, mountLinesOf(dir))
	}
	second := filepath.Join(dir, "ktav-pod2")
	if err := netnsfile.Create(second); err != nil {
		t.Errorf("a pod's netns in the netns dir after the adopted container's gc calls: %v", err)
	} else if err := netnsfile.Remove(second); err != nil {
		t.Errorf("remove %s: %v", second, err)
	}
}

// mountNamespaceOf is pid's mount namespace, as /proc names it.
func mountNamespaceOf(t *testing.T, pid int) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// mountLinesOf is the lines of /proc/self/mountinfo whose mount point is
// dir, for a failure's message.
func mountLinesOf(dir string) string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
