package networkpod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// The cni-netplugin image in a real container: a netns made after the
// container started is visible there, add configures it, del undoes it.
func TestBridgeAddDel(t *testing.T) {
	p := newTestHost(t, nil)
	img := netplugImage(t)
	conf := []byte(`{"cniVersion":"1.0.0","name":"ktnbr","type":"bridge","bridge":"kt-host0","isGateway":true,` +
		`"ipam":{"type":"host-local","subnet":"10.202.0.0/16"}}`)
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("kt-host0"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	startGenerations(t, p, Spec{Network: "ktnbr", Definition: gendef.Definition{Image: img, Config: conf}})
	if st := statusOf(p, "ktnbr"); st.State != StateRunning || st.Image != img.ID {
		t.Fatalf("status %+v", st)
	}
	nsPath := newNetns(t, p.NetnsDir(), "ktn-pod1")
	ctx := context.Background()

	stdout, stderr, err := p.Exec(ctx, testCall("ktnbr", 0, "/opt/network/add", []string{nsPath, "ktn-pod1", "eth0"}, conf))
	if err != nil {
		t.Fatalf("add: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("add result %s: %v", stdout, err)
	}
	ip, ipnet, err := net.ParseCIDR(res.IPs[0].Address)
	if err != nil || !strings.HasPrefix(ipnet.String(), "10.202.") {
		t.Fatalf("address %q: %v", res.IPs[0].Address, err)
	}
	addrs := testutil.IPv4In(t, nsPath, "eth0")
	if !testutil.HasIP(addrs, ip) {
		t.Fatalf("eth0 in the netns has %v, want %s", addrs, ip)
	}
	// host-local's state lives under StateDir, through the /var/lib/cni mount.
	if _, err := os.Stat(filepath.Join(p.pluginStateHostDir("ktnbr"), "networks", "ktnbr", ip.String())); err != nil {
		t.Errorf("host-local reservation not under the state dir: %v", err)
	}

	if _, stderr, err := p.Exec(ctx, testCall("ktnbr", 0, "/opt/network/del", []string{nsPath, "ktn-pod1", "eth0"}, conf)); err != nil {
		t.Fatalf("del: %v\nstderr: %s", err, stderr)
	}
	// The image declares kurma's cni-wrapper: the agent ran it in-process.
	if fork, inproc := execModes(t, p, "ktnbr"); fork != 0 || inproc != 2 {
		t.Errorf("calls served by fork/exec %d, in-process %d; want 0 and 2", fork, inproc)
	}
	if addrs := testutil.IPv4In(t, nsPath, "eth0"); addrs != nil {
		t.Fatalf("eth0 still there after del: %v", addrs)
	}

	// Many pods at once: each gets its own address.
	const pods = 6
	paths := make([]string, pods)
	for i := range paths {
		paths[i] = newNetns(t, p.NetnsDir(), fmt.Sprintf("ktn-c%d", i))
	}
	type result struct {
		i   int
		out []byte
		err error
	}
	results := make(chan result, pods)
	for i, path := range paths {
		go func() {
			out, _, err := p.Exec(ctx, testCall("ktnbr", 0, "/opt/network/add", []string{path, fmt.Sprintf("ktn-c%d", i), "eth0"}, conf))
			results <- result{i, out, err}
		}()
	}
	seen := map[string]bool{}
	for range pods {
		r := <-results
		if r.err != nil {
			t.Fatalf("concurrent add %d: %v", r.i, r.err)
		}
		var res struct {
			IPs []struct{ Address string } `json:"ips"`
		}
		if err := json.Unmarshal(r.out, &res); err != nil || len(res.IPs) == 0 || seen[res.IPs[0].Address] {
			t.Fatalf("concurrent add %d: %s (%v)", r.i, r.out, err)
		}
		seen[res.IPs[0].Address] = true
	}
	for i, path := range paths {
		if _, stderr, err := p.Exec(ctx, testCall("ktnbr", 0, "/opt/network/del", []string{path, fmt.Sprintf("ktn-c%d", i), "eth0"}, conf)); err != nil {
			t.Errorf("del %d: %v %s", i, err, stderr)
		}
	}
}

// An add that hangs and leaves a setsid'd child holding stdout: killed at
// the limit with every process, and the container still serves calls.
func TestExecTimeoutKillsTree(t *testing.T) {
	p := newTestHost(t, func(o *Options) { o.PluginTimeout = 500 * time.Millisecond })
	startGenerations(t, p, Spec{Network: "kth", Definition: gendef.Definition{Image: toolImage(t, "main")}})
	ctx := context.Background()

	cases := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		wantErr func(error) bool
		want    string
	}{
		{
			name:    "plugin timeout",
			ctx:     func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) },
			wantErr: func(err error) bool { return errors.Is(err, netplugin.ErrTimeout) },
			want:    `network "kth": /bin/hang: timed out after 500ms`,
		},
		{
			name:    "earlier ctx deadline",
			ctx:     func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 300*time.Millisecond) },
			wantErr: func(err error) bool { return errors.Is(err, netplugin.ErrTimeout) },
			want:    `network "kth": /bin/hang: timed out after 300ms`,
		},
		{
			name: "ctx cancelled",
			ctx: func() (context.Context, context.CancelFunc) {
				// Cancel once both processes run: this also proves that
				// processesNamed sees them.
				c, cancel := context.WithCancel(ctx)
				go func() {
					_ = testutil.Poll(c, 10*time.Second, "the call's two processes", func() error {
						if ps := processesNamed("/bin/hang", "/bin/hangchild"); len(ps) < 2 {
							return fmt.Errorf("running: %v", ps)
						}
						return nil
					})
					cancel()
				}()
				return c, cancel
			},
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, _, err := p.Exec(cctx, testCall("kth", 0, "/bin/hang", []string{"x"}, []byte("{}")))
			took := time.Since(start)
			if !tc.wantErr(err) {
				t.Fatalf("got %v", err)
			}
			if tc.want != "" && err.Error() != tc.want {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			if took > 2*time.Second {
				t.Errorf("took %s", took)
			}
			// The agent answers after the kill, and Exec waits for that.
			if left := processesNamed("/bin/hang", "/bin/hangchild"); len(left) > 0 {
				t.Fatalf("processes of the call left: %v", left)
			}
			out, _, err := p.Exec(ctx, testCall("kth", 0, "/bin/echo", nil, []byte("still here")))
			if err != nil || string(out) != "still here" {
				t.Fatalf("next call: %q, %v", out, err)
			}
		})
	}
	if st := statusOf(p, "kth"); st.State != StateRunning || st.Restarts != 0 {
		t.Fatalf("container affected by the failed calls: %+v", st)
	}
}

// A main that exits marks the network failed with the reason, calls fail
// fast, and it is restarted; one that keeps failing is restarted with
// growing delays.
func TestMainExitsAndRestarts(t *testing.T) {
	failures := make(chan time.Time, 64) // ktnow's, as logged
	var (
		mu     sync.Mutex
		words  []string     // ktwords' failure reasons, as logged
		slowed atomic.Int32 // ktwords' first lines the log was slow to take
	)
	p := newTestHost(t, func(o *Options) { // backoff 100ms → 800ms
		// kurmad's log is slow to take ktwords' first line: the main has
		// ended before kurmad read its last.
		onLog(o, logrus.InfoLevel, func(e *logrus.Entry) {
			if e.Data["network"] == "ktwords" && e.Message == "hosttool failmain: line 0" {
				slowed.Add(1)
				time.Sleep(200 * time.Millisecond)
			}
		})
		onLog(o, logrus.ErrorLevel, func(e *logrus.Entry) {
			if e.Data["network"] == "ktwords" && e.Message == "generation failed" {
				mu.Lock()
				words = append(words, fmt.Sprint(e.Data["reason"]))
				mu.Unlock()
			}
			if e.Data["network"] == "ktnow" {
				select {
				case failures <- e.Time:
				default:
				}
			}
		})
	})
	startGenerations(t, p,
		Spec{Network: "ktlate", Definition: gendef.Definition{Image: toolImage(t, "failmain", "FAILMAIN_DELAY=700ms")}},
		Spec{Network: "ktnow", Definition: gendef.Definition{Image: toolImage(t, "failmain")}},
		Spec{Network: "ktwords", Definition: gendef.Definition{Image: toolImage(t, "failmain", "FAILMAIN_DELAY=100ms", "FAILMAIN_LINES=1")}},
	)
	var sawFailed Status
	testutil.WaitFor(t, 5*time.Second, "ktlate to fail", statusWhere(p, "ktlate", func(st Status) bool {
		sawFailed = st
		return st.State == StateFailed
	}))
	for _, s := range []string{"exit status 3", "giving up"} {
		if !strings.Contains(sawFailed.Reason, s) {
			t.Errorf("reason %q lacks %q", sawFailed.Reason, s)
		}
	}
	// The reason is the network's state or last failure at the moment of
	// the call, so the message is checked as built around it.
	_, _, err := p.Exec(context.Background(), testCall("ktnow", 0, "/bin/noop", nil, nil))
	var unavailable *netplugin.UnavailableError
	if !errors.Is(err, netplugin.ErrUnavailable) || !errors.As(err, &unavailable) || unavailable.Reason == "" ||
		err.Error() != `network "ktnow": unavailable: `+unavailable.Reason {
		t.Fatalf("exec on a failed network: %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, "ktlate to be restarted", statusWhere(p, "ktlate", func(st Status) bool {
		return st.Restarts >= 1
	}))

	// ktnow's main fails at once, every time: each failure (as logged) is
	// followed by the next attempt only after the backoff
	// delay, doubling from RestartBase to RestartMax. Without backoff the
	// failures would follow each other within milliseconds.
	backoff := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 800 * time.Millisecond}
	prev := nextFailure(t, failures)
	for i, delay := range backoff {
		at := nextFailure(t, failures)
		if gap := at.Sub(prev); gap < delay {
			t.Errorf("ktnow failure %d came %v after failure %d, want at least the %v backoff", i+2, gap, i+1, delay)
		}
		prev = at
	}
	st := statusOf(p, "ktnow")
	if st.Restarts < len(backoff) {
		t.Errorf("ktnow restarts %d after %d failures", st.Restarts, len(backoff)+1)
	}
	if st.State != StateFailed && st.State != StateStarting {
		t.Errorf("ktnow state %q", st.State)
	}
	// A main's reason carries what it said last, however late kurmad
	// reads its stderr.
	mu.Lock()
	defer mu.Unlock()
	if len(words) == 0 || slowed.Load() == 0 {
		t.Errorf("ktwords failed %d times, its first line slowed %d times; want both", len(words), slowed.Load())
	}
	for _, r := range words {
		if !strings.Contains(r, "line 0; hosttool failmain: giving up") {
			t.Errorf("ktwords failed with reason %q, want the main's last stderr lines", r)
		}
	}
}

// nextFailure is the time of the next failure on failures.
func nextFailure(t *testing.T, failures <-chan time.Time) time.Time {
	t.Helper()
	select {
	case at := <-failures:
		return at
	case <-time.After(10 * time.Second):
		t.Fatal("no failure logged for 10s")
		return time.Time{}
	}
}

// One broken network (a bad main) never affects another. (One without an
// image is networks.Controller's: TestWaitForImage.)
func TestBrokenNetworkIsolated(t *testing.T) {
	p := newTestHost(t, nil)
	bad := toolImage(t, "main")
	bad.App.Exec = []string{"/bin/missing"}
	begin := time.Now()
	startGenerations(t, p,
		Spec{Network: "ktbad", Definition: gendef.Definition{Image: bad}},
		Spec{Network: "ktok", Definition: gendef.Definition{Image: toolImage(t, "main")}},
	)
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("Start took %s", took)
	}
	got := map[string]Status{}
	for _, s := range p.Status() {
		got[s.Network] = s
	}
	if names := []string{p.Status()[0].Network, p.Status()[1].Network}; strings.Join(names, ",") != "ktbad,ktok" {
		t.Errorf("status order %v", names)
	}
	if got["ktok"].State != StateRunning {
		t.Errorf("ktok: %+v", got["ktok"])
	}
	if got["ktbad"].State != StateFailed && got["ktbad"].State != StateStarting || !strings.Contains(got["ktbad"].Reason+statusOf(p, "ktbad").Reason, "missing") {
		// the reason is set once the first attempt failed
		testutil.WaitFor(t, 3*time.Second, "ktbad's reason", statusWhere(p, "ktbad", func(st Status) bool {
			return strings.Contains(st.Reason, "missing")
		}))
	}
	if out, _, err := p.Exec(context.Background(), testCall("ktok", 0, "/bin/echo", nil, []byte("ok"))); err != nil || string(out) != "ok" {
		t.Fatalf("ktok exec: %q %v", out, err)
	}
}

// A daemon that died without Stop leaves running containers, and without
// adoption records (it died before they served, or it was a kurmad that
// wrote none): the next Host on the same run dir removes them (no
// duplicates), and its Stop leaves nothing.
func TestStaleContainersCleanedUp(t *testing.T) {
	p1 := newTestHost(t, nil)
	specs := []Spec{{Network: "kts1", Definition: gendef.Definition{Image: toolImage(t, "main")}}, {Network: "kts2", Definition: gendef.Definition{Image: toolImage(t, "main")}}}
	startGenerations(t, p1, specs...)
	var oldPids []int
	for _, s := range p1.Status() {
		if s.State != StateRunning {
			t.Fatalf("%+v", s)
		}
		oldPids = append(oldPids, s.Pid)
	}
	p1.abandonAll()
	for _, s := range specs {
		if err := os.Remove(p1.adoptionRecordPath(s.key())); err != nil {
			t.Fatal(err)
		}
	}

	var p2 *Host
	p2 = successorHost(t, p1, func() {
		assertNothingLeft(t, p2)
		for _, pid := range oldPids {
			if processExists(pid) {
				t.Errorf("old main %d still alive", pid)
			}
		}
	})
	startGenerations(t, p2, specs...)
	for _, pid := range oldPids {
		if processExists(pid) {
			t.Errorf("stale main %d survived the new Start", pid)
		}
	}
	for _, s := range p2.Status() {
		if s.State != StateRunning {
			t.Fatalf("%+v", s)
		}
		if n := len(p2.cgroupPids(containerKey(s.Network, s.Generation))); n != 2 { // main + agent
			t.Errorf("%s: %d processes in its cgroup, want 2 (main, agent)", s.Network, n)
		}
		if out, _, err := p2.Exec(context.Background(), testCall(s.Network, 0, "/bin/echo", nil, []byte("x"))); err != nil || string(out) != "x" {
			t.Errorf("%s: %q %v", s.Network, out, err)
		}
	}
	if got, _ := mountPointsUnder(filepath.Join(p2.opts.RunDir, "networks")); len(got) != 4 {
		t.Errorf("mounts under the run dir: %v, want the 2 overlays and their writable layers' tmpfs", got)
	}
}

// TestContainersAdopted: a Host that detaches leaves its containers
// running; the next Host on the run dir adopts those whose generation it
// starts again with the same spec (the same main and agent processes,
// serving calls, their restart counts kept), replaces the one whose spec
// changed (its old main stopped) and, once told which it keeps (Prune),
// removes the one nothing starts again. Its Stop leaves nothing.
func TestContainersAdopted(t *testing.T) {
	p1 := newTestHost(t, nil)
	kept := Spec{Network: "ktad1", Definition: gendef.Definition{Image: toolImage(t, "main"), Config: []byte(`{"v":1}`)}}
	changed := Spec{Network: "ktad2", Definition: gendef.Definition{Image: kept.Image, Config: []byte(`{"v":1}`)}}
	dropped := Spec{Network: "ktad3", Definition: gendef.Definition{Image: kept.Image, Config: []byte(`{"v":1}`)}}
	startGenerations(t, p1, kept, changed, dropped)
	before := map[string]Status{}
	agents := map[string]int{}
	for _, s := range p1.Status() {
		if s.State != StateRunning || s.Pid == 0 {
			t.Fatalf("%+v", s)
		}
		before[s.Network] = s
		n, _ := p1.lookup(s.Network, 0)
		inst, err := n.running()
		if err != nil {
			t.Fatal(err)
		}
		agents[s.Network] = inst.agentPid
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p1.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	for name, s := range before {
		if !processExists(s.Pid) || !processExists(agents[name]) {
			t.Fatalf("%s: main %d or agent %d gone after Detach", name, s.Pid, agents[name])
		}
	}

	var p2 *Host
	p2 = successorHost(t, p1, func() {
		assertNothingLeft(t, p2)
		for name, s := range before {
			if processExists(s.Pid) || processExists(agents[name]) {
				t.Errorf("%s: main %d or agent %d alive after Stop", name, s.Pid, agents[name])
			}
		}
	})
	survivors, err := p2.Survivors()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(survivors); len(survivors) != 3 || survivors[0].Network != "ktad1" || survivors[2].Network != "ktad3" ||
		survivors[0].Image != kept.Image.ID {
		t.Fatalf("survivors %s, want ktad1, ktad2, ktad3 of image %s", got, kept.Image.ID)
	}
	changed.Config = []byte(`{"v":2}`)
	startGenerations(t, p2, kept, changed)
	p2.Prune(func(string, int) bool { return false })

	st := statusOf(p2, "ktad1")
	n, _ := p2.lookup("ktad1", 0)
	inst, err := n.running()
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateRunning || st.Pid != before["ktad1"].Pid || inst.agentPid != agents["ktad1"] || st.Restarts != before["ktad1"].Restarts {
		t.Errorf("ktad1 = %+v (agent %d), want it adopted: running, main %d, agent %d", st, inst.agentPid, before["ktad1"].Pid, agents["ktad1"])
	}
	if out, _, err := p2.Exec(context.Background(), testCall("ktad1", 0, "/bin/echo", nil, []byte("x"))); err != nil || string(out) != "x" {
		t.Errorf("ktad1 adopted: exec %q %v", out, err)
	}
	if n := len(p2.cgroupPids(containerKey("ktad1", 0))); n != 2 {
		t.Errorf("ktad1: %d processes in its cgroup, want 2 (main, agent)", n)
	}
	st = statusOf(p2, "ktad2")
	if st.State != StateRunning || st.Pid == 0 || st.Pid == before["ktad2"].Pid {
		t.Errorf("ktad2 = %+v, want a new main for its changed config", st)
	}
	for _, name := range []string{"ktad2", "ktad3"} {
		if processExists(before[name].Pid) || processExists(agents[name]) {
			t.Errorf("%s: the main %d or agent %d the earlier Host left runs on", name, before[name].Pid, agents[name])
		}
	}
	if got, _ := p2.Survivors(); len(got) != 0 {
		t.Errorf("survivors after the Starts and Prune: %v", got)
	}
	if _, err := os.Stat(filepath.Join(p2.containersRoot(), containerID(containerKey("ktad3", 0)))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ktad3's container state: %v, want it removed", err)
	}
}

// The agent dying is a network failure: the container is recreated and
// serves calls again.
func TestAgentDeathRestarts(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kta", Definition: gendef.Definition{Image: toolImage(t, "main")}})
	n, _ := p.lookup("kta", 0)
	inst, err := n.running()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(inst.agentPid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "kta to fail", statusWhere(p, "kta", func(st Status) bool {
		return st.Restarts >= 1 || st.State == StateFailed
	}))
	testutil.WaitFor(t, 10*time.Second, "kta to run again", statusWhere(p, "kta", func(st Status) bool {
		return st.State == StateRunning && st.Restarts >= 1
	}))
	if out, _, err := p.Exec(context.Background(), testCall("kta", 0, "/bin/echo", nil, []byte("back"))); err != nil || string(out) != "back" {
		t.Fatalf("%q %v", out, err)
	}
}

// Stop: SIGTERM, the grace period, SIGKILL for a main that ignores it;
// state stopped; nothing left (checked by newTestHost's cleanup too).
func TestStop(t *testing.T) {
	p := newTestHost(t, func(o *Options) { o.StopGrace = 300 * time.Millisecond })
	startGenerations(t, p,
		Spec{Network: "ktpolite", Definition: gendef.Definition{Image: toolImage(t, "main")}},
		Spec{Network: "ktstubborn", Definition: gendef.Definition{Image: toolImage(t, "stubborn")}},
	)
	var pids []int
	for _, s := range p.Status() {
		if s.State != StateRunning {
			t.Fatalf("%+v", s)
		}
		pids = append(pids, s.Pid)
	}
	begin := time.Now()
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("Stop took %s with a 300ms grace", took)
	}
	for _, s := range p.Status() {
		if s.State != StateStopped {
			t.Errorf("after Stop: %+v", s)
		}
	}
	for _, pid := range pids {
		if processExists(pid) {
			t.Errorf("main %d still alive", pid)
		}
	}
	assertNothingLeft(t, p)
	if _, _, err := p.Exec(context.Background(), testCall("ktpolite", 0, "/bin/noop", nil, nil)); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Errorf("Exec after Stop: %v", err)
	}
}

// TestAgentIsInit: the exec agent is the container's init and the main
// executable its child (one runc process per container). The status's PID
// is the main's, a child of the agent, not PID 1 inside; the main holds the
// container's capabilities and not the agent's own, runs under its
// seccomp filter, in the container's cgroup rather than a call's. A kill -9
// of the main fails the generation with the main's reason, as when the main
// was the init, and it starts again.
func TestAgentIsInit(t *testing.T) {
	failed := make(chan string, 8)
	p := newTestHost(t, func(o *Options) {
		o.StopGrace = 20 * time.Second // a main that never got SIGTERM shows
		onLog(o, logrus.ErrorLevel, func(e *logrus.Entry) {
			if r, ok := e.Data["reason"].(string); ok && e.Data["network"] == "ktinit" {
				select {
				case failed <- r:
				default:
				}
			}
		})
	})
	startGenerations(t, p, Spec{Network: "ktinit", Definition: gendef.Definition{Image: toolImage(t, "main")}})
	n, _ := p.lookup("ktinit", 0)
	inst, err := n.running()
	if err != nil {
		t.Fatal(err)
	}
	agentPid := inst.agentPid
	mainPid := statusOf(p, "ktinit").Pid
	// The agent forks the main from a thread confined for it, and the
	// child executes the main.
	var main map[string]string
	testutil.WaitFor(t, 5*time.Second, "the main executed", func() error {
		if main = procStatusFields(t, mainPid); main["Name"] != "main" {
			return fmt.Errorf("pid %d is %q", mainPid, main["Name"])
		}
		return nil
	})
	agent := procStatusFields(t, agentPid)
	if main["PPid"] != strconv.Itoa(agentPid) {
		t.Errorf("status pid %d is %q, child of %s; want main, child of the agent %d", mainPid, main["Name"], main["PPid"], agentPid)
	}
	if nspid := strings.Fields(agent["NSpid"]); len(nspid) < 2 || nspid[len(nspid)-1] != "1" {
		t.Errorf("agent's NSpid %q: want it to be PID 1 inside", agent["NSpid"])
	}
	if nspid := strings.Fields(main["NSpid"]); len(nspid) < 2 || nspid[len(nspid)-1] == "1" {
		t.Errorf("main's NSpid %q: want a child of the init", main["NSpid"])
	}
	const ptrace = 1 << unix.CAP_SYS_PTRACE
	for _, set := range []string{"CapPrm", "CapEff", "CapBnd", "CapAmb", "CapInh"} {
		if capMask(t, main[set])&ptrace != 0 {
			t.Errorf("main's %s %s holds CAP_SYS_PTRACE, the agent's own", set, main[set])
		}
	}
	if capMask(t, agent["CapEff"])&ptrace == 0 && p.kurmadCapabilities()["CAP_SYS_PTRACE"] {
		t.Errorf("agent's CapEff %s lacks CAP_SYS_PTRACE", agent["CapEff"])
	}
	if main["Seccomp"] != "2" {
		t.Errorf("main's Seccomp %q, want 2 (a filter)", main["Seccomp"])
	}
	// Its own filter alone, set on the thread that forked it: not the
	// agent's (installed after, with the clone3 notification) on top.
	if n, ok := main["Seccomp_filters"]; ok && n != "1" {
		t.Errorf("main has %s seccomp filters, want its own alone", n)
	}
	if n, ok := agent["Seccomp_filters"]; ok && n != "1" {
		t.Errorf("the agent has %s seccomp filters, want its own alone", n)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", mainPid))
	if err != nil || strings.Contains(string(cg), "call-") {
		t.Errorf("main's cgroups %q (%v): want the container's, not a call's", cg, err)
	}

	// A call in flight when the main dies ends with the container, as it
	// did when the main was the init: it does not run on to its timeout.
	callDone := make(chan error, 1)
	go func() {
		_, _, err := p.Exec(context.Background(), testCall("ktinit", 0, "/bin/hangchild", nil, nil))
		callDone <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the call to run", func() error {
		for _, pid := range p.cgroupPids(n.key) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "hangchild" {
				return nil
			}
		}
		return errors.New("no hangchild in the container")
	})
	if err := unix.Kill(mainPid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-failed:
		if !strings.HasPrefix(r, "main process signal: killed") {
			t.Errorf("reason %q, want the main's end", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failure logged after the main's kill -9")
	}
	select {
	case err := <-callDone:
		if err == nil {
			t.Error("the call in flight when the main died succeeded")
		}
	case <-time.After(10 * time.Second): // the plugin timeout is 20 s
		t.Error("the call in flight when the main died still runs")
	}
	testutil.WaitFor(t, 10*time.Second, "ktinit to run again", statusWhere(p, "ktinit", func(st Status) bool {
		return st.State == StateRunning && st.Restarts >= 1 && st.Pid > 0 && st.Pid != mainPid
	}))

	// Stop's SIGTERM goes to the init, which hands it to the main: a main
	// that never got it would be killed only after the 20 s grace.
	begin := time.Now()
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("Stop took %s: the main did not get SIGTERM", took)
	}
}

// firstChild is the first child of pid's threads, 0 when none.
func firstChild(pid int) int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	return 0
}

// procStatusFields is /proc/<pid>/status as a map.
func procStatusFields(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// capMask parses a capability set of /proc/<pid>/status.
func capMask(t *testing.T, hex string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatalf("capability set %q: %v", hex, err)
	}
	return v
}

// TestMainEndedBeforeReadyNeverRunning: a main that ended before its
// agent could serve fails that start with the main's reason and is never
// reported running, however the main's end and the agent's readiness race
// (the agent reaps the main only once it serves, when it also answers);
// then a main that runs comes up running. For each of the first starts the
// seam kills the main right after the agent started, before the agent can
// serve, and waits until the main is a zombie: it has ended, for certain,
// before the agent is ready. Every state change is recorded and the status
// is polled tightly meanwhile.
func TestMainEndedBeforeReadyNeverRunning(t *testing.T) {
	const kills = 8
	var (
		mu      sync.Mutex
		states  []string
		reasons []string // of the failures, as logged
	)
	p := newTestHost(t, func(o *Options) {
		o.RestartBase, o.RestartMax = 10*time.Millisecond, 20*time.Millisecond
		onLog(o, logrus.ErrorLevel, func(e *logrus.Entry) {
			if e.Data["network"] != "ktready" {
				return
			}
			r, ok := e.Data["reason"]
			if !ok {
				r = e.Data[logrus.ErrorKey]
			}
			mu.Lock()
			reasons = append(reasons, fmt.Sprint(r))
			mu.Unlock()
		})
		o.OnState = func(network string, _ int, state string) {
			if network == "ktready" {
				mu.Lock()
				states = append(states, state)
				mu.Unlock()
			}
		}
	})
	var fired atomic.Int32
	afterAgentStart = func(inst *instance) {
		if fired.Add(1) > kills {
			return
		}
		// The agent's first child is the main (a copy of the agent until
		// it executes the main).
		var pid int
		if err := testutil.Poll(context.Background(), 10*time.Second, "the agent's main", func() error {
			if pid = firstChild(inst.agentPid); pid == 0 {
				return errors.New("the agent has no child yet")
			}
			return nil
		}); err != nil {
			t.Error(err)
			return
		}
		if err := unix.Kill(pid, unix.SIGKILL); err != nil {
			t.Errorf("kill the main %d: %v", pid, err)
			return
		}
		// Ended means reapable: a killed Go process's leader shows Z
		// while its other threads still exit, and until they have, the
		// kernel reports no end to a wait (nor to the agent's).
		err := testutil.Poll(context.Background(), 10*time.Second, "the killed main to be a zombie", func() error {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				return err // reaped: the agent does not before it serves
			}
			if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) == 0 || f[0] != "Z" {
				return fmt.Errorf("pid %d: %q", pid, b)
			}
			if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); err != nil || len(tasks) != 1 {
				return fmt.Errorf("pid %d: a zombie leader with %d threads still exiting (%v)", pid, len(tasks)-1, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { afterAgentStart = nil })

	// Tight polling: a status that says running while the main was one of
	// the killed ones (fewer restarts than kills).
	stopPoll := make(chan struct{})
	polled := make(chan []Status, 1)
	go func() {
		var bad []Status
		for {
			select {
			case <-stopPoll:
				polled <- bad
				return
			default:
			}
			if st := statusOf(p, "ktready"); st.State == StateRunning && st.Restarts < kills {
				bad = append(bad, st)
			}
		}
	}()
	startGenerations(t, p, Spec{Network: "ktready", Definition: gendef.Definition{Image: toolImage(t, "main")}})
	testutil.WaitFor(t, 30*time.Second, "ktready running after its killed starts", statusWhere(p, "ktready", func(st Status) bool {
		return st.State == StateRunning && st.Restarts == kills
	}))
	close(stopPoll)
	if bad := <-polled; len(bad) > 0 {
		t.Errorf("polled running %d times with a main that had ended, first %+v", len(bad), bad[0])
	}
	if n := fired.Load(); n < kills {
		t.Fatalf("the seam fired %d times, want at least %d", n, kills)
	}
	mu.Lock()
	defer mu.Unlock()
	failed := 0
	for _, s := range states {
		if s == StateRunning {
			break
		}
		if s == StateFailed {
			failed++
		}
	}
	if failed != kills {
		t.Errorf("states %v: %d failures before the first running, want %d (each killed main fails its start)", states, failed, kills)
	}
	for _, r := range reasons {
		if !strings.HasPrefix(r, "main process signal: killed") {
			t.Errorf("failure %q, want the killed main's reason", r)
		}
	}
	if len(reasons) != kills {
		t.Errorf("%d failures logged, want %d", len(reasons), kills)
	}
	if st := statusOf(p, "ktready"); st.Pid <= 0 || !processExists(st.Pid) {
		t.Errorf("status %+v: want the running main's PID", st)
	}
}

// TestStopDuringStartLeavesNothing: a Stop that comes while kurma-init
// starts a container (a main restarting when kurmad stops, as in
// TestMainExitsAndRestarts) leaves no container running, and no cgroup,
// mount or state of it, once kurma-init is gone too: the start's teardown
// waits for kurma-init's answer rather than run before the container
// exists.
func TestStopDuringStartLeavesNothing(t *testing.T) {
	p := newTestHost(t, nil)
	var (
		once    sync.Once
		initPid int
	)
	beforeAgentStart = func(ctx context.Context, n *generation) {
		if n.spec.Network != "ktsds" {
			return
		}
		once.Do(func() {
			if err := p.starter.ensure(); err != nil {
				t.Error(err)
			}
			p.starter.mu.Lock()
			initPid = p.starter.cmd.Process.Pid
			p.starter.mu.Unlock()
			n.requestStop()
			<-ctx.Done() // the start is cancelled before kurma-init is even asked
		})
	}
	t.Cleanup(func() { beforeAgentStart = nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Start(ctx, []Spec{{Network: "ktsds", Definition: gendef.Definition{Image: toolImage(t, "main")}}}); err != nil {
		t.Fatal(err)
	}
	n, _ := p.lookup("ktsds", 0)
	select {
	case <-n.done:
	case <-ctx.Done():
		t.Fatal("ktsds still supervised a minute after its stop")
	}
	if st := statusOf(p, "ktsds"); st.State != StateStopped {
		t.Errorf("ktsds = %+v, want stopped", st)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// kurma-init ends once the Host let go of it, its start done: what it
	// made after the Host's teardown would be there by then.
	testutil.WaitFor(t, 15*time.Second, "kurma-init to end", func() error {
		if processExists(initPid) {
			return fmt.Errorf("kurma-init %d runs", initPid)
		}
		return nil
	})
	if pids := p.cgroupPids(containerKey("ktsds", 0)); len(pids) > 0 {
		t.Errorf("processes %v left in ktsds's cgroups after the stopped start", pids)
	}
	assertNothingLeft(t, p)
}
