package networkpod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// victimPod makes, in p's netns dir, the namespace of a pod of another
// network, as a bridge plugin leaves it: a veth to the host, so that the
// host's namespace holds an id for it, and a link ktvictim0 inside; and a
// host link kth-move0 to move (bridges: this kernel may lack dummy). It returns the path and the id.
func victimPod(t *testing.T, p *Host, name string) (string, int) {
	t.Helper()
	path := newNetns(t, p.NetnsDir(), name)
	f, err := netnsfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kth-vh0"}, PeerName: "kth-vp0", PeerNamespace: netlink.NsFd(int(f.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(veth) })
	move := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "kth-move0"}}
	if err := netlink.LinkAdd(move); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("kth-move0"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	if err := netnsfile.Do(path, func() error {
		return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "ktvictim0"}})
	}); err != nil {
		t.Fatal(err)
	}
	id, err := netlink.GetNetNsIdByFd(int(f.Fd()))
	if err != nil || id < 0 {
		t.Fatalf("the host holds no id for the victim's namespace (%d, %v)", id, err)
	}
	return path, id
}

// TestHostileTrespass: a plugin's add that reaches another network's pod
// through the id the host's network namespace holds for it (it makes a
// link there, deletes one, moves a host link in) fails, with an error
// naming that pod and what changed; kurmad logs it and the network's
// status says it. The plugin's own pod, changed by its own call, is no
// trespass.
func TestHostileTrespass(t *testing.T) {
	var (
		mu     sync.Mutex
		logged []string
	)
	p := newTestHost(t, func(o *Options) {
		onLog(o, logrus.ErrorLevel, func(e *logrus.Entry) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, fmt.Sprintf("%s network=%v pod=%v change=%v", e.Message, e.Data["network"], e.Data["pod"], e.Data["change"]))
		})
	})
	startGenerations(t, p, Spec{Network: "kthtrespass", Image: hostileImage(t, "trespass")})
	_, nsid := victimPod(t, p, "kth-victim")
	own := newNetns(t, p.NetnsDir(), "kth-own")
	stdin, _ := json.Marshal(map[string]any{"victim_nsid": nsid, "victim_link": "ktvictim0", "host_link": "kth-move0"})
	out, stderr, err := p.Exec(context.Background(), testCall("kthtrespass", 0, "/opt/network/add", []string{own, "0badcccc-0000-4000-8000-000000000000", "eth0"}, stdin))
	var report map[string]string
	_ = json.Unmarshal(out, &report)
	t.Logf("outcomes: %v\n%s", report, stderr)
	if report["make a link by id"] != "ok" && report["delete a link by id"] != "ok" && report["move a host link by id"] != "ok" {
		t.Fatalf("no route changed the victim on this kernel: %v", report)
	}
	var te *TrespassError
	if !errors.As(err, &te) || !errors.Is(err, netplugin.ErrPluginFailed) {
		t.Fatalf("add: %v; want a *TrespassError (a plugin failure)", err)
	}
	if te.Pod != "kth-victim" {
		t.Errorf("trespass names pod %q, want kth-victim: %v", te.Pod, err)
	}
	if !strings.Contains(err.Error(), `network "kthtrespass"`) || !strings.Contains(err.Error(), "/opt/network/add") {
		t.Errorf("error does not name the network and the call: %v", err)
	}
	if st := statusOf(p, "kthtrespass"); !strings.Contains(st.Trespass, "kth-victim") {
		t.Errorf("the network's status says %q, want the trespass on kth-victim", st.Trespass)
	}
	mu.Lock()
	found := false
	for _, l := range logged {
		found = found || (strings.Contains(l, "network=kthtrespass") && strings.Contains(l, "pod=kth-victim"))
	}
	mu.Unlock()
	if !found {
		t.Errorf("no error logged naming the network and the pod: %q", logged)
	}
	stillServes(t, p, "kthtrespass")
}

// TestHostileMainSeesNoPod: while a call runs in its pod's network
// namespace, the main executable of its network (no main_sees_pods) finds
// the call's process and tries to reach the pod through its /proc: the
// netns dir in its root, the pod's netns file there, its ns/net, a
// descriptor of its, a setns through its pidfd. The kernel's ptrace access check
// refuses each (the call holds a capability the main lacks).
func TestHostileMainSeesNoPod(t *testing.T) {
	p := newTestHost(t, nil)
	img := hostileImage(t, "peek")
	img.App.Exec = []string{"/opt/network/add", "hostile-main"}
	img.App.Env = append(img.App.Env, "KURMA_HOSTILE_NETNS_DIR="+p.NetnsDir())
	startGenerations(t, p, Spec{Network: "kthpeek", Image: img})
	ns := newNetns(t, p.NetnsDir(), "kth-peeked")
	add := execReport(t, p, "kthpeek", "/opt/network/add", []string{ns, "0baddddd-0000-4000-8000-000000000000", "eth0"})
	if add["enter its pod"] != "ok" || add["main reported"] != "yes" {
		t.Fatalf("the add: %v; want it in its pod until the main reported", add)
	}
	var main map[string]string
	b, err := os.ReadFile(filepath.Join(p.pluginStateHostDir("kthpeek"), "hostile-peek.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &main); err != nil {
		t.Fatal(err)
	}
	t.Logf("main: %v", main)
	if main["pod"] != "kth-peeked" {
		t.Fatalf("the main found no call of pod kth-peeked: %v", main)
	}
	for _, k := range []string{"list the call's netns dir", "open the pod's netns through the call's root", "open the call's ns/net",
		"open the call's stdout", "setns through the call's pidfd"} {
		if got := main[k]; got != "EACCES" && got != "EPERM" {
			t.Errorf("main: %s: %s, want EACCES or EPERM (the kernel's ptrace access check)", k, got)
		}
	}
	stillServes(t, p, "kthpeek")
}
