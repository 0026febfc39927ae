package networkpod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// TestAdoptedAgentStillNamesItsContainer: calls, each started by the agent
// on a thread that enters the call's view and ends with it, leave the
// agent's process mount namespace (its main thread's: what
// /proc/<agent>/ns/mnt names, what the next kurmad copies its views from)
// the container's, through adoptions. A gc call's view holds the host's
// netns dir whole: copied from such a view, the next Host's views would
// stack a read-only copy of the netns dir on the host's, and no pod's
// netns could be made or removed there (issue 39's TestCrashPoints
// failure).
func TestAdoptedAgentStillNamesItsContainer(t *testing.T) {
	p := newTestHost(t, nil)
	spec := Spec{Network: "ktav", Image: toolImage(t, "main")}
	startGenerations(t, p, spec)
	pod := newNetns(t, p.NetnsDir(), "ktav-pod")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Three Hosts in turn, each adopting the container the one before
	// left: each opens its connections to the agent anew (its main
	// thread back from accept finds its place taken, and runs whatever
	// comes next), and runs calls four at a time (more connections).
	for round := range 3 {
		if round > 0 {
			if err := p.Detach(ctx); err != nil {
				t.Fatal(err)
			}
			next, err := New(p.opts)
			if err != nil {
				t.Fatal(err)
			}
			p = next
			t.Cleanup(func() {
				_ = netnsfile.Remove(pod)
				if err := next.Stop(context.Background()); err != nil {
					t.Errorf("Stop: %v", err)
				}
				assertNothingLeft(t, next)
			})
			startGenerations(t, p, spec)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				for range 10 {
					_, _, _ = p.Exec(ctx, testCall("ktav", 0, netplugin.GCPath, nil, nil)) // no gc in the image: its view is made all the same
					if out, _, err := p.Exec(ctx, testCall("ktav", 0, "/bin/echo", []string{pod}, []byte("x"))); err != nil || string(out) != "x" {
						errs <- fmt.Errorf("exec with the pod's netns: %q %v", out, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		n, _ := p.lookup("ktav", 0)
		inst, err := n.running()
		if err != nil {
			t.Fatal(err)
		}
		if round > 0 && !inst.adopted {
			t.Fatalf("round %d: ktav not adopted", round)
		}
		agentNs, mainNs := mountNamespaceOf(t, inst.agentPid), mountNamespaceOf(t, inst.pid)
		if agentNs != mainNs {
			t.Errorf("round %d: agent %d's mount namespace is %s after its calls, its container's (the main %d's) %s",
				round, inst.agentPid, agentNs, inst.pid, mainNs)
		}
		// The host's netns dir is its own bind mount, the pod's netns,
		// and nothing else: a pod can be made there and removed.
		dir := p.NetnsDir()
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
			t.Fatalf("round %d: %d mounts on the netns dir %s after the calls, want 1:\n%s", round, onDir, dir, mountLinesOf(dir))
		}
		second := filepath.Join(dir, "ktav-pod2")
		if err := netnsfile.Create(second); err != nil {
			t.Fatalf("round %d: a pod's netns in the netns dir after the calls: %v", round, err)
		}
		if err := netnsfile.Remove(second); err != nil {
			t.Fatalf("remove %s: %v", second, err)
		}
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
