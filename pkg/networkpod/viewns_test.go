package networkpod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// TestAdoptedCallViewsStayInTheContainer: the calls of an adopted
// container run in views made from the container's own mount namespace,
// which the next kurmad finds through the agent's PID. After many calls,
// each of which starts its processes on a thread of the agent's that
// enters that call's view and ends there, the agent's PID still names the
// container's namespace (its main's), so a Host that adopts the container
// makes its views from the container's mounts, not from an old call's.
// An old gc call's view holds the host's netns dir itself (a peer of its
// mount): a view made from it would mount its tmpfs on the host's netns
// dir, hiding every pod's netns file. So after the adoption the pod's
// netns file is still there, and the host's netns dir is one mount.
func TestAdoptedCallViewsStayInTheContainer(t *testing.T) {
	p1 := newTestHost(t, nil)
	img := toolImage(t, "main")
	testutil.CopyExecutable(t, filepath.Join(img.Rootfs, "bin", "main"), filepath.Join(img.Rootfs, "opt", "network", "gc"))
	spec := Spec{Network: "ktview", Definition: gendef.Definition{Image: img}}
	startGenerations(t, p1, spec)
	ns := newNetns(t, p1.NetnsDir(), "0badcafe-0000-4000-8000-000000000001")
	gc := testCall("ktview", 0, netplugin.GCPath, nil, nil)
	echo := testCall("ktview", 0, "/bin/echo", []string{ns}, []byte("x"))

	// Many calls at once, so that their process starts run on every thread
	// the agent has, its main thread too unless it is kept out of them.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 40 {
				_, _, _ = p1.Exec(context.Background(), gc) // hosttool's gc fails: only its view matters
				if out, _, err := p1.Exec(context.Background(), echo); err != nil || string(out) != "x" {
					t.Errorf("echo: %q %v", out, err)
					return
				}
			}
		})
	}
	wg.Wait()
	n, _ := p1.lookup("ktview", 0)
	inst, err := n.running()
	if err != nil {
		t.Fatal(err)
	}
	agentPid := inst.agentPid
	agentNs, mainNs := mountNamespaceOf(t, inst.agentPid), mountNamespaceOf(t, inst.mainHostPid())
	if agentNs != mainNs {
		t.Errorf("after 320 calls the agent %d is in mount namespace %s, its main in %s (the container's): the agent's PID no longer names the container's mounts",
			inst.agentPid, agentNs, mainNs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p1.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	p2 := successorHost(t, p1, nil)
	startGenerations(t, p2, spec)
	n, _ = p2.lookup("ktview", 0)
	if inst, err := n.running(); err != nil || !inst.adopted || inst.agentPid != agentPid {
		t.Fatalf("ktview after the restart: %v, want its container adopted (agent %d)", err, agentPid)
	}
	for range 8 {
		_, _, _ = p2.Exec(context.Background(), gc)
		if out, _, err := p2.Exec(context.Background(), echo); err != nil || string(out) != "x" {
			t.Fatalf("echo after the adoption: %q %v", out, err)
		}
	}
	if !netnsfile.IsMounted(ns) {
		t.Errorf("the pod's netns %s is no longer a mounted namespace on the host after the adopted container's calls", ns)
	}
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p2.NetnsDir()))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 1 {
		for _, m := range mounts {
			t.Logf("mount on %s: %s %s %s", p2.NetnsDir(), m.FSType, m.Options, m.Optional)
		}
		t.Errorf("%d mounts on the host's netns dir %s, want its one bind mount: a call's view mounted on it", len(mounts), p2.NetnsDir())
	}
}

// mountNamespaceOf names the mount namespace of process pid.
func mountNamespaceOf(t *testing.T, pid int) string {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no process (pid %d)", pid)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
