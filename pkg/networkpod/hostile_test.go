package networkpod

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// Hostile plugin images, one per attack: each is the hosttool image (main
// and the helpers under /bin) with internal/testplugins/hostile as
// /opt/network/add doing the attack named by its KURMA_HOSTILE.

func hostileImage(t testing.TB, attack string) *imagefetch.Image {
	t.Helper()
	img := toolImage(t, "main", "KURMA_HOSTILE="+attack)
	img.ID = "sha512-test-hostile-" + attack
	testutil.CopyExecutable(t, testutil.BuildStatic(t, "./internal/testplugins/hostile"), filepath.Join(img.Rootfs, "opt/network/add"))
	return img
}

// hostileAdd runs the image's add and decodes its report.
func hostileAdd(t *testing.T, p *Host, network, pod string) map[string]string {
	t.Helper()
	ns := newNetns(t, p.NetnsDir(), "kth-"+pod[:8])
	out, stderr, err := p.Exec(context.Background(), testCall(network, 0, "/opt/network/add", []string{ns, pod, "eth0"}, []byte("{}")))
	if err != nil {
		t.Fatalf("add: %v\n%s", err, stderr)
	}
	var report map[string]string
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("add printed %q: %v", out, err)
	}
	t.Logf("outcomes: %v", report)
	return report
}

// stillServes checks that the network runs its first container and
// answers a call through the real exec agent.
func stillServes(t *testing.T, p *Host, network string) {
	t.Helper()
	out, _, err := p.Exec(context.Background(), testCall(network, 0, "/bin/echo", nil, []byte("from the real agent")))
	if err != nil || string(out) != "from the real agent" {
		t.Errorf("next call: %q, %v", out, err)
	}
	if st := statusOf(p, network); st.State != StateRunning || st.Restarts != 0 {
		t.Errorf("network affected: %+v", st)
	}
}

// TestHostilePlant: a plugin that plants UUID-named entries in the netns
// dir (a symlink to /proc/1/ns/net, one to a host dir, a file) fails
// (the dir is read-only in the container) and the host dir holds nothing
// new; its listener where the agent's socket used to be in the container
// never sees a call (kurmad's socket is not in the container).
// TestReconcileIgnoresPlantings (podnet) plants the same from the host.
func TestHostilePlant(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kthplant", Image: hostileImage(t, "plant")})
	report := hostileAdd(t, p, "kthplant", "0bad1111-0000-4000-8000-000000000000")
	for _, k := range []string{"symlink to /proc/1/ns/net", "symlink to a host dir", "file"} {
		if report[k] != "EROFS" {
			t.Errorf("%s: %s, want EROFS (read-only netns dir)", k, report[k])
		}
	}
	entries, err := os.ReadDir(p.NetnsDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "kth-") {
			t.Errorf("planted in the host's netns dir: %s", e.Name())
			_ = os.Remove(filepath.Join(p.NetnsDir(), e.Name()))
		}
	}
	stillServes(t, p, "kthplant")
}

// TestHostileEscalate: a plugin that tries open_by_handle_at, insmod
// (init_module, finit_module, delete_module), kexec_load, bpf, a write to
// /proc/sysrq-trigger and to /proc/sys/kernel, and mknod of a disk is
// denied each time, while /proc/sys/net and /dev/net/tun work; the network
// keeps working. An image that asks for CAP_SYS_MODULE with the network's
// consent gets it and init_module passes the filter (the kernel then
// answers); one that asks without consent does not start.
func TestHostileEscalate(t *testing.T) {
	p := newTestHost(t, nil)
	consented := hostileImage(t, "escalate")
	consented.ID += "-consented"
	consented.Labels = map[string]string{netplugin.CapabilitiesLabel: "CAP_SYS_MODULE"}
	unconsented := hostileImage(t, "escalate")
	unconsented.ID += "-unconsented"
	unconsented.App.Capabilities = []string{"CAP_BPF"}
	startGenerations(t, p,
		Spec{Network: "kthesc", Image: hostileImage(t, "escalate")},
		Spec{Network: "kthmod", Image: consented, AllowCapabilities: []string{"CAP_SYS_MODULE", "CAP_BPF"}},
		Spec{Network: "kthbpf", Image: unconsented, AllowCapabilities: []string{"CAP_SYS_MODULE"}},
	)
	denied := map[string]string{
		"open_by_handle_at": "EPERM", "init_module": "EPERM", "finit_module": "EPERM", "delete_module": "EPERM",
		"kexec_load": "EPERM", "bpf": "EPERM", "/proc/sys/kernel": "EROFS", "mknod disk": "EPERM",
		"/proc/sys/net": "ok", "/dev/net/tun": "ok",
		"CAP_DAC_READ_SEARCH": "not held", "CAP_SYS_MODULE": "not held", "CAP_NET_ADMIN": "held",
	}
	report := hostileAdd(t, p, "kthesc", "0bad2222-0000-4000-8000-000000000000")
	for k, want := range denied {
		if report[k] != want {
			t.Errorf("%s: %s, want %s", k, report[k], want)
		}
	}
	// This kernel may have no sysrq or timer_list: then the route is not
	// there to try; where it is, the path is read-only or masked.
	switch got := report["sysrq-trigger"]; got {
	case "EROFS":
	case "ENOENT":
		t.Logf("route /proc/sysrq-trigger skipped: this kernel has none")
	default:
		t.Errorf("sysrq-trigger: %s, want EROFS", got)
	}
	switch got := report["read /proc/timer_list"]; got {
	case "empty":
	case "ENOENT":
		t.Logf("route /proc/timer_list skipped: this kernel has none")
	default:
		t.Errorf("/proc/timer_list: %s, want masked (empty)", got)
	}
	stillServes(t, p, "kthesc")

	report = hostileAdd(t, p, "kthmod", "0bad3333-0000-4000-8000-000000000000")
	if report["CAP_SYS_MODULE"] != "held" || report["init_module"] == "EPERM" || report["open_by_handle_at"] != "EPERM" || report["bpf"] != "EPERM" {
		t.Errorf("consented CAP_SYS_MODULE: %v; want it held, init_module past the filter, the rest denied", report)
	}
	// It is retried with backoff: between a failure and the next try its
	// state is starting, so wait for a failure rather than read one.
	testutil.WaitFor(t, 10*time.Second, "the image asking for an unconsented capability to fail", statusWhere(p, "kthbpf", func(st Status) bool {
		return st.State == StateFailed && strings.Contains(st.Reason, "asks for CAP_BPF") && strings.Contains(st.Reason, ErrCapabilityNotAllowed.Error())
	}))
	if _, _, err := p.Exec(context.Background(), testCall("kthbpf", 0, "/bin/echo", nil, nil)); !errors.Is(err, netplugin.ErrUnavailable) {
		t.Errorf("call to it: %v, want netplugin.ErrUnavailable", err)
	}
}

// TestHostileEscape: two concurrent adds of a plugin that double-forks a
// child that calls setsid and starts a grandchild that closes every fd and
// sleeps, while the add itself sleeps, each process having first tried
// every route out of its cgroup (a cgroup filesystem, the agent's
// descriptors): all are still in their call's cgroup; both time out; when the first
// returns every process of it is gone and the second's are untouched; when
// the second returns its processes are gone too. With both kinds of call
// cgroup this host offers.
func TestHostileEscape(t *testing.T) {
	for _, kind := range []string{agent.CgroupV2, agent.CgroupFreezer} {
		t.Run(kind, func(t *testing.T) {
			if why := callCgroupKindMissing(kind); why != "" {
				t.Skipf("calls in %s cgroups skipped: %s", kind, why)
			}
			p := newTestHost(t, nil)
			p.callCgroupKind = kind
			startGenerations(t, p, Spec{Network: "kthfork", Image: hostileImage(t, "escape")})
			pods := []string{"0bad4444-0000-4000-8000-00000000000" + kind[:1], "0bad5555-0000-4000-8000-00000000000" + kind[:1]}
			limits := []time.Duration{1500 * time.Millisecond, 4 * time.Second}
			type result struct {
				err    error
				took   time.Duration
				others []string // the other call's processes when this one returned
			}
			results := make([]result, 2)
			var wg sync.WaitGroup
			for i := range pods {
				ns := newNetns(t, p.NetnsDir(), "kth-"+pods[i][:8])
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), limits[i])
					defer cancel()
					start := time.Now()
					_, _, err := p.Exec(ctx, testCall("kthfork", 0, "/opt/network/add", []string{ns, pods[i], "eth0"}, nil))
					results[i] = result{err: err, took: time.Since(start), others: processesWith(pods[1-i])}
					if left := processesWith(pods[i]); len(left) > 0 {
						t.Errorf("call %d returned with processes of it alive: %v", i, left)
					}
				}()
			}
			testutil.WaitFor(t, 5*time.Second, "both calls' grandchildren", func() error {
				if !hasGrandchild(pods[0]) || !hasGrandchild(pods[1]) {
					return errors.New("not both yet")
				}
				return nil
			})
			// Every process tried to leave its call's cgroup (a cgroup
			// filesystem, the agent's descriptors) before sleeping: each
			// is still in one.
			for _, pod := range pods {
				for _, pid := range pidsWith(pod) {
					cg := hostCgroup(pid, kind)
					if cg == "" && !processExists(pid) {
						continue // the double fork's child, exiting once it started the grandchild
					}
					if !strings.Contains(cg, "/"+containerID(containerKey("kthfork", 0))+"/call-") {
						t.Errorf("process %d of pod %s is in cgroup %q, not its call's", pid, pod, cg)
					}
				}
			}
			wg.Wait()
			for i, r := range results {
				if !errors.Is(r.err, netplugin.ErrTimeout) {
					t.Errorf("call %d: %v, want netplugin.ErrTimeout", i, r.err)
				}
				if r.took > limits[i]+2*time.Second {
					t.Errorf("call %d took %s (limit %s)", i, r.took, limits[i])
				}
			}
			if n := len(results[0].others); n != 2 || !slices.ContainsFunc(results[0].others, isGrandchild) {
				t.Errorf("when the first call returned the second's processes were %v; want its add and its grandchild", results[0].others)
			}
			stillServes(t, p, "kthfork")
		})
	}
}

// callCgroupKindMissing says why this host has no hierarchy for call
// cgroups of kind (a v1 freezer one, a cgroup2 one), "" when it has.
func callCgroupKindMissing(kind string) string {
	if kind == agent.CgroupV2 {
		m, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
		if err != nil || len(m) == 0 {
			return fmt.Sprintf("no cgroup2 hierarchy is mounted (%v)", err)
		}
		return ""
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "freezer") {
			return ""
		}
	}
	return "no cgroup v1 freezer hierarchy"
}

// processesWith lists the processes whose argv holds s (as the host sees
// them).
func processesWith(s string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(data, []byte(s)) || !processExistsName(e.Name()) {
			continue
		}
		out = append(out, e.Name()+": "+strings.Join(strings.Split(strings.TrimRight(string(data), "\x00"), "\x00"), " "))
	}
	return out
}

// pidsWith lists the pids of the processes whose argv holds s.
func pidsWith(s string) []int {
	var out []int
	for _, p := range processesWith(s) {
		if pid, err := strconv.Atoi(strings.SplitN(p, ":", 2)[0]); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// hostCgroup is pid's cgroup, as the host sees it, in the hierarchy of the
// call cgroups of kind; "" when the process is gone.
func hostCgroup(pid int, kind string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if (kind == agent.CgroupV2 && parts[0] == "0") || (kind == agent.CgroupFreezer && slices.Contains(strings.Split(parts[1], ","), "freezer")) {
			return parts[2]
		}
	}
	return ""
}

func processExistsName(pid string) bool {
	var n int
	_, err := fmt.Sscan(pid, &n)
	return err == nil && processExists(n)
}

func isGrandchild(p string) bool { return strings.Contains(p, "hostile-escape-grandchild") }

func hasGrandchild(pod string) bool { return slices.ContainsFunc(processesWith(pod), isGrandchild) }

// TestReplacedAgentSocketAnswer2GiB: whatever answers on the agent's socket
// (here the test, in place of the agent, sending 2 GiB), kurmad reads at
// most a bounded answer: its heap stays small and the call fails with a
// clear error.
func TestReplacedAgentSocketAnswer2GiB(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kthbig", Image: toolImage(t, "main")})
	sock := p.agentSocket(containerKey("kthbig", 0))
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// The next call dials the socket again (kurmad keeps one connection).
	if n, err := p.lookup("kthbig", 0); err == nil {
		if inst, err := n.running(); err == nil {
			inst.calls.close()
		}
	}
	const total, bound = 2 << 30, 64 << 20
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	sample := func() bool {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > peak.Load() {
			peak.Store(ms.HeapInuse)
		}
		return ms.HeapInuse > base.HeapInuse+bound
	}
	done := make(chan struct{})
	tooMuch := make(chan struct{}) // the client reads it all: stop sending
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if sample() {
				close(tooMuch)
				return
			}
		}
	}()
	served := make(chan struct{})
	go func() { defer close(served); serveHuge(l, total, tooMuch) }()
	_, _, err = p.Exec(context.Background(), testCall("kthbig", 0, "/bin/echo", nil, nil))
	close(done)
	<-served
	sample()
	if !errors.Is(err, netplugin.ErrPluginFailed) || !errors.Is(err, agent.ErrTooLarge) {
		t.Errorf("got %v; want netplugin.ErrPluginFailed wrapping agent.ErrTooLarge", err)
	}
	if got := peak.Load(); got > base.HeapInuse+bound {
		t.Errorf("heap grew from %d MiB to at least %d MiB reading the answer", base.HeapInuse>>20, got>>20)
	}
}

// serveHuge answers one call with an answer frame of total bytes,
// stopping early when tooMuch is closed.
func serveHuge(l net.Listener, total int, tooMuch <-chan struct{}) {
	c, err := l.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	h, err := agent.ReadHeader(c)
	if err != nil {
		return
	}
	head := binary.BigEndian.AppendUint32(nil, uint32(total))
	head = append(head, agent.FrameAnswer)
	if _, err := c.Write(binary.BigEndian.AppendUint64(head, h.ID)); err != nil {
		return
	}
	chunk := bytes.Repeat([]byte("A"), 1<<20)
	for sent := 0; sent < total; sent += len(chunk) {
		select {
		case <-tooMuch:
			return
		default:
		}
		if _, err := c.Write(chunk); err != nil {
			return
		}
	}
}

// containImage is the hostile image whose add, gc and main executable all
// run the contain attack (internal/testplugins/hostile).
func containImage(t *testing.T) *imagefetch.Image {
	t.Helper()
	img := hostileImage(t, "contain")
	img.ID += "-main"
	testutil.CopyExecutable(t, filepath.Join(img.Rootfs, "opt/network/add"), filepath.Join(img.Rootfs, "opt/network/gc"))
	img.App.Exec = []string{"/opt/network/add", "hostile-main"}
	return img
}

// hostState is what the contain attack must leave as it was on the host.
type hostState map[string]string

// hostKnobs are host files the attack would change if a route were open;
// the attack only ever opens the /sys ones (never writes them) and sets
// hostname and domainname to their current values, so even a regression
// leaves the machine as it was.
var hostKnobs = []string{
	"/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname", "/proc/sys/kernel/core_pattern",
	"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/devices/system/cpu/cpu0/online",
	"/sys/devices/system/cpu/cpu1/online", "/sys/power/state",
	"/proc/sys/net/core/bpf_jit_enable", "/proc/sys/net/core/bpf_jit_harden",
	"/proc/sys/net/core/bpf_jit_kallsyms", "/proc/sys/net/core/bpf_jit_limit",
}

func readHostState(t *testing.T) hostState {
	t.Helper()
	st := hostState{}
	for _, p := range hostKnobs {
		if b, err := os.ReadFile(p); err == nil {
			st[p] = string(b)
		}
	}
	return st
}

// TestHostileContain: a plugin image whose add, gc and main executable try
// every route out of the container (internal/testplugins/hostile,
// contain) is refused each time, with the errno of the mechanism that
// must refuse it (EPERM from the seccomp filter, ENOSYS for clone3, EROFS
// from a read-only mount, EACCES or EPERM from the kernel's ptrace access
// check for the agent), while what plugins need (forking, the network's
// sysfs trees) works; the main executable, which races the agent's start,
// never reaches it either; and the host's hostname, domainname,
// core_pattern and /sys knobs are unchanged. A second network that
// consents to keyctl, unshare and clone3 (allow_syscalls) gets exactly
// those past the filter.
func TestHostileContain(t *testing.T) {
	before := readHostState(t)
	t.Cleanup(func() {
		// Should containment ever regress, put the host's names back.
		for _, p := range []string{"/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname"} {
			if b, err := os.ReadFile(p); err == nil && string(b) != before[p] {
				_ = os.WriteFile(p, []byte(strings.TrimSpace(before[p])), 0o644)
			}
		}
	})
	// A System V shared memory segment of the host's, which the plugins'
	// IPC namespace must not show.
	shm, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(shm, unix.IPC_RMID, nil) })
	p := newTestHost(t, nil)
	consented := containImage(t)
	consented.ID += "-consented"
	startGenerations(t, p,
		Spec{Network: "kthcontain", Image: containImage(t)},
		Spec{Network: "kthconsent", Image: consented, AllowSyscalls: []string{"keyctl", "unshare", "clone3"}},
	)

	denied := map[string]string{
		"mount proc": "EPERM", "remount /proc/sys/kernel rw": "EPERM", "mount cgroup2": "EPERM", "mount sysfs": "EPERM",
		"umount2 /proc/sys": "EPERM", "pivot_root": "EPERM", "fsopen cgroup2": "EPERM", "fspick /proc": "EPERM",
		"open_tree /proc": "EPERM", "open_tree_attr /proc": "EPERM", "move_mount": "EPERM", "mount_setattr": "EPERM",
		"fsconfig": "EPERM", "fsmount": "EPERM",
		"sethostname": "EPERM", "setdomainname": "EPERM",
		"open /proc/sys/kernel/hostname for writing": "EROFS", "open /proc/sys/kernel/core_pattern for writing": "EROFS",
		"keyctl": "EPERM", "add_key": "EPERM", "request_key": "EPERM", "perf_event_open": "EPERM", "syslog": "EPERM",
		"swapon": "EPERM", "swapoff": "EPERM", "userfaultfd": "EPERM", "acct": "EPERM", "quotactl_fd": "EPERM",
		"fanotify_init": "EPERM", "io_uring_setup": "EPERM", "reboot": "EPERM", "kexec_file_load": "EPERM",
		"clone CLONE_NEWUSER": "EPERM", "unshare CLONE_NEWUSER": "EPERM", "clone3": "ENOSYS",
		"clone (no new namespace)":                        "ok",
		"create in /sys/fs/cgroup":                        "ENOENT", // an empty directory of the read-only sysfs
		"open /sys/class/net/lo/tx_queue_len for writing": "ok", "open /sys/devices/virtual/net/lo/mtu for writing": "ok",
		"open /sys/devices/virtual/net/lo/uevent for writing": "EPERM", "open /sys/class/net/lo/uevent for writing": "EPERM",
		"ptrace agent": "EPERM", "pidfd_getfd agent": "EPERM", "process_vm_readv agent": "EPERM",
		"host SysV IPC objects visible": "0",
		"CAP_SYS_PTRACE":                "not held",
	}
	accessDenied := []string{"open agent mem", "readlink agent fds", "open agent ns/mnt", "open agent root", "join a cgroup through the agent's fds"}
	check := func(who string, report map[string]string, wantCgroup func(string) bool) {
		t.Helper()
		for k, want := range denied {
			if report[k] != want {
				t.Errorf("%s: %s: %s, want %s", who, k, report[k], want)
			}
		}
		for _, k := range accessDenied {
			if got := report[k]; got != "EACCES" && got != "EPERM" {
				t.Errorf("%s: %s: %s, want EACCES or EPERM", who, k, got)
			}
		}
		for _, p := range []string{"/sys/devices/system/cpu/cpu0/online", "/sys/devices/system/cpu/cpu1/online", "/sys/kernel/uevent_helper", "/sys/power/state",
			"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/bus/pci/rescan", "/sys/block"} {
			k := "open " + p + " for writing"
			got, tried := report[k]
			switch {
			case !tried:
				t.Logf("%s: route %s skipped: this machine has no %s", who, k, p)
			case p == "/sys/block" && got != "EISDIR" && got != "EROFS":
				t.Errorf("%s: %s: %s, want EROFS (or EISDIR)", who, k, got)
			case p != "/sys/block" && got != "EROFS":
				t.Errorf("%s: %s: %s, want EROFS", who, k, got)
			}
		}
		for _, p := range []string{"/proc/kmsg", "/proc/mtrr", "/sys/devices/virtual/powercap"} {
			k := "open " + p
			switch got, tried := report[k]; {
			case !tried:
				t.Logf("%s: route %s skipped: this machine has no %s", who, k, p)
			case got != "masked":
				t.Errorf("%s: %s: %s, want masked", who, k, got)
			}
		}
		if !wantCgroup(report["cgroup"]) {
			t.Errorf("%s: sees its cgroup as %q", who, report["cgroup"])
		}
	}
	inCall := func(cg string) bool { return strings.HasPrefix(cg, "/call-") }
	ns := newNetns(t, p.NetnsDir(), "kth-contain")
	add := execReport(t, p, "kthcontain", "/opt/network/add", []string{ns, "0bad6666-0000-4000-8000-000000000000", "eth0"})
	check("add", add, inCall)
	gc := execReport(t, p, "kthcontain", "/opt/network/gc", nil)
	check("gc", gc, inCall)

	main := mainReport(t, p, "kthcontain")
	check("main", main, func(cg string) bool { return cg == "/" })
	tries, _ := strconv.Atoi(main["race: tries"])
	if tries == 0 {
		t.Errorf("main never raced the agent: %v", main["agent"])
	}
	for k, v := range main {
		if strings.HasPrefix(k, "race: ") && k != "race: tries" && v != "EACCES" && v != "EPERM" {
			t.Errorf("main: %s: %s, want EACCES or EPERM (over %d tries from before the agent started)", k, v, tries)
		}
	}
	stillServes(t, p, "kthcontain")
	// The agent forked every call with clone3 and kurmad's gate let it
	// through; the plugins' clone3 (add's, gc's) were the gate's to refuse.
	n, err := p.lookup("kthcontain", 0)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := n.running()
	if err != nil {
		t.Fatal(err)
	}
	kind := callCgroupKind(t, inst)
	if kind != agent.CgroupV2 {
		// The agent forks with clone into a v1 freezer cgroup: its filter
		// has no notification, and ENOSYS above came from the filter.
		t.Logf("clone3 gate not checked: this host's calls run in %s cgroups, with no gate", kind)
	} else if let, refused := inst.gate.counts(); let < 3 || refused < 2 {
		t.Errorf("the clone3 gate let %d through and refused %d; want the agent's forks (3 or more) and the add's and gc's clone3 (2 or more)", let, refused)
	}

	// Consent lifts exactly the calls named.
	c := execReport(t, p, "kthconsent", "/opt/network/add", []string{ns, "0bad7777-0000-4000-8000-000000000000", "eth0"})
	for k, want := range map[string][]string{
		"keyctl":                {"ok", "ENOKEY"},
		"unshare CLONE_NEWUSER": {"EINVAL"}, // the kernel's answer to a multi-threaded caller
		"clone3":                {"EINVAL"}, // size 0
		"clone CLONE_NEWUSER":   {"EPERM"},
		"mount proc":            {"EPERM"},
	} {
		if !slices.Contains(want, c[k]) {
			t.Errorf("consented network: %s: %s, want one of %v", k, c[k], want)
		}
	}
	if m := mainReport(t, p, "kthconsent"); m["clone3"] != "EINVAL" || m["keyctl"] == "EPERM" {
		t.Errorf("consented network's main: clone3 %s, keyctl %s; want both past the filter", m["clone3"], m["keyctl"])
	}

	if after := readHostState(t); !maps.Equal(before, after) {
		for k := range after {
			if before[k] != after[k] {
				t.Errorf("host's %s changed from %q to %q", k, before[k], after[k])
			}
		}
	}
}

// execReport runs path in network's container and decodes its report.
func execReport(t *testing.T, p *Host, network, path string, args []string) map[string]string {
	t.Helper()
	out, stderr, err := p.Exec(context.Background(), testCall(network, 0, path, args, []byte("{}")))
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", network, path, err, stderr)
	}
	var report map[string]string
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("%s %s printed %q: %v", network, path, out, err)
	}
	t.Logf("%s %s: %v", network, path, report)
	return report
}

// mainReport waits for the report the hostile main executable leaves in
// the network's state dir.
func mainReport(t *testing.T, p *Host, network string) map[string]string {
	t.Helper()
	file := filepath.Join(p.pluginStateHostDir(network), "hostile-main.json")
	var report map[string]string
	testutil.WaitFor(t, 20*time.Second, "the main executable's report", func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &report)
	})
	t.Logf("%s main: %v", network, report)
	return report
}

// wallImage is the hostile image whose add, gc and main executable all run
// the wall attack after contain's (the main's), with the netns dir p shows
// it.
func wallImage(t *testing.T, p *Host, id string) *imagefetch.Image {
	t.Helper()
	img := hostileImage(t, "wall")
	img.ID += "-" + id
	testutil.CopyExecutable(t, filepath.Join(img.Rootfs, "opt/network/add"), filepath.Join(img.Rootfs, "opt/network/gc"))
	img.App.Exec = []string{"/opt/network/add", "hostile-main"}
	img.App.Env = append(img.App.Env, "KURMA_HOSTILE_NETNS_DIR="+p.NetnsDir())
	return img
}

// wallMounts are the container's mounts the wall attack tries the
// filesystem ioctls through (it adds the netns dir and a netns file when it
// sees them).
var wallMounts = []string{"/", "/var/lib/cni", "/.kurma-agent", "/lib/modules", "/proc", "/sys", "/sys/class/net",
	"/dev", "/dev/pts", "/dev/shm", "/tmp", "/run", "/dev/null"}

// TestHostileWall: a plugin image whose add, gc and main executable try
// the filesystem ioctls (FITHAW, FS_IOC_SHUTDOWN, FS_IOC_SETFSLABEL,
// FS_IOC_FSSETXATTR) through every mount of its container, the host's
// root filesystem (the agent's bind), the state dir's, the netns dir and
// a pod's netns file among them, and FIFREEZE on its /tmp, gets EPERM from
// the filter each time while TCGETS on the same descriptor passes it; a
// socket of each refused netlink family (uevent, audit, connector, ...)
// fails with EPERM and the allowed ones open; the BPF JIT sysctls are
// read-only; CAP_AUDIT_WRITE, CAP_SYS_RESOURCE and the rest of the trimmed
// set are not held, so the OOM killer's immunity and a hard rlimit are out
// of reach and mlock stops at its rlimit. The add sees its own pod's netns
// and no other, gc every pod's and the main executable none; a network that
// asks for them (main_sees_pods) gives its main both. A network consenting to
// "ioctl", "socket" and "bpf" gets those past the filter. The host's knobs
// (the BPF JIT's among them) are unchanged.
func TestHostileWall(t *testing.T) {
	before := readHostState(t)
	p := newTestHost(t, nil)
	startGenerations(t, p,
		Spec{Network: "kthwall", Image: wallImage(t, p, "wall")},
		Spec{Network: "kthwallok", Image: wallImage(t, p, "consented"), AllowSyscalls: []string{"ioctl", "socket", "bpf"}},
		Spec{Network: "kthwallsee", Image: wallImage(t, p, "sees"), MainSeesPods: true},
	)
	own := newNetns(t, p.NetnsDir(), "kth-wall-own")
	newNetns(t, p.NetnsDir(), "kth-wall-other")

	check := func(who string, r map[string]string, ownNetns string) {
		t.Helper()
		mounts := slices.Clone(wallMounts)
		if ownNetns != "" {
			mounts = append(mounts, p.NetnsDir(), filepath.Join(p.NetnsDir(), ownNetns))
		}
		for _, m := range mounts {
			if got, ok := r["open "+m]; ok {
				if m == "/lib/modules" && got == "ENOENT" {
					t.Logf("%s: route through /lib/modules skipped: this host has none", who)
					continue
				}
				t.Errorf("%s: open %s: %s", who, m, got)
				continue
			}
			for _, ioc := range []string{"FITHAW", "FS_IOC_SHUTDOWN", "FS_IOC_SETFSLABEL", "FS_IOC_FSSETXATTR"} {
				if got := r[ioc+" via "+m]; got != "EPERM" {
					t.Errorf("%s: %s via %s: %s, want EPERM (the filter)", who, ioc, m, got)
				}
			}
			if got := r["TCGETS via "+m]; got == "EPERM" || got == "" {
				t.Errorf("%s: TCGETS via %s: %q, want the file's answer (past the filter)", who, m, got)
			}
		}
		want := map[string]string{
			"FIFREEZE via /tmp":    "EPERM",
			"socket NETLINK_ROUTE": "ok", "socket NETLINK_NETFILTER": "ok", "socket NETLINK_GENERIC": "ok",
			"socket NETLINK_XFRM": "ok", "socket NETLINK_SOCK_DIAG": "ok",
			"CAP_AUDIT_WRITE": "not held", "CAP_SYS_RESOURCE": "not held", "CAP_IPC_LOCK": "not held",
			"CAP_MKNOD": "not held", "CAP_SETUID": "not held", "CAP_SYS_CHROOT": "not held", "CAP_SETPCAP": "not held",
			"CAP_SYS_ADMIN": "held", "lower oom_score_adj": "EACCES", "raise RLIMIT_NOFILE": "EPERM",
			"netns dir": ownNetns,
		}
		for _, f := range []string{"KOBJECT_UEVENT", "AUDIT", "CONNECTOR", "CRYPTO", "SELINUX", "ISCSI", "SCSITRANSPORT", "RDMA", "USERSOCK", "FIB_LOOKUP"} {
			want["socket NETLINK_"+f] = "EPERM"
		}
		for _, s := range bpfJITSysctls {
			if _, err := os.Stat(s); err == nil {
				want["open "+s+" for writing"] = "EROFS"
			}
		}
		for k, w := range want {
			if r[k] != w {
				t.Errorf("%s: %s: %q, want %q", who, k, r[k], w)
			}
		}
		if got := r["mlock 64 MiB"]; got != "ENOMEM" && got != "EPERM" {
			t.Errorf("%s: mlock 64 MiB: %s, want ENOMEM or EPERM (RLIMIT_MEMLOCK, no CAP_IPC_LOCK)", who, got)
		}
	}
	check("add", execReport(t, p, "kthwall", "/opt/network/add", []string{own, "0bad8888-0000-4000-8000-000000000000", "eth0"}), "kth-wall-own")
	// gc sees every pod's namespace, read-only: it deletes what pods
	// kurmad forgot left (TestGCAfterJournalLost, test/e2e).
	gc := execReport(t, p, "kthwall", "/opt/network/gc", nil)
	if gc["netns dir"] != "kth-wall-other,kth-wall-own" {
		t.Errorf("gc: sees %q in the netns dir, want every pod's namespace", gc["netns dir"])
	}
	gc["netns dir"] = ""
	check("gc", gc, "")
	main := mainReport(t, p, "kthwall")
	if main["netns dir"] != "" {
		t.Errorf("main: sees %q in the netns dir, want nothing", main["netns dir"])
	}
	delete(main, "netns dir")
	main["netns dir"] = ""
	check("main", main, "")
	if got := mainReport(t, p, "kthwallsee")["netns dir"]; got != "kth-wall-other,kth-wall-own" {
		t.Errorf("main_sees_pods: the main sees %q, want both pods' namespaces", got)
	}
	stillServes(t, p, "kthwall")

	c := execReport(t, p, "kthwallok", "/opt/network/add", []string{own, "0bad9999-0000-4000-8000-000000000000", "eth0"})
	for k, want := range map[string][]string{
		"FITHAW via /tmp": {"EINVAL"}, "FIFREEZE via /tmp": {"ok", "EOPNOTSUPP"}, "socket NETLINK_AUDIT": {"ok"},
		"socket NETLINK_KOBJECT_UEVENT": {"ok"}, "open /proc/sys/net/core/bpf_jit_harden for writing": {"ok"},
	} {
		if !slices.Contains(want, c[k]) {
			t.Errorf("consenting network: %s: %s, want one of %v (past the filter)", k, c[k], want)
		}
	}
	if after := readHostState(t); !maps.Equal(before, after) {
		for k := range after {
			if before[k] != after[k] {
				t.Errorf("host's %s changed from %q to %q", k, before[k], after[k])
			}
		}
	}
}

// callLimitsMissing says why this host gives calls no limits of their own
// ("" when it does): they need the cgroup v1 memory and pids hierarchies.
func callLimitsMissing() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err.Error()
	}
	for _, c := range []string{"memory", "pids"} {
		found := false
		for _, l := range strings.Split(string(b), "\n") {
			if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), c) {
				found = true
			}
		}
		if !found {
			return "no cgroup v1 " + c + " hierarchy"
		}
	}
	return ""
}

// TestHostileBounds: with small limits, a plugin that forks until refused
// stops at its call's task limit (EAGAIN, and kurmad's note on the call's
// stderr names the limit); one that fills /tmp, /run, /dev/shm, its
// writable layer and its state dir stops at each one's size (ENOSPC), the
// state dir being a filesystem of its own, not the one of kurmad's state
// dir; one that touches memory until it dies is killed at its call's
// memory limit and its call fails saying so. The container's cgroup
// carries the container's limits; the networks and the host's state dir
// keep working.
func TestHostileBounds(t *testing.T) {
	limits := netconfig.Limits{Pids: 400, CallPids: 64, Memory: 384 << 20, CallMemory: 128 << 20,
		Tmpfs: 8 << 20, WritableLayer: 16 << 20, StateDir: 16 << 20}
	p := newTestHost(t, nil)
	startGenerations(t, p,
		Spec{Network: "kthbounds", Image: hostileImage(t, "bounds"), Limits: limits},
		Spec{Network: "kthhog", Image: hostileImage(t, "memory"), Limits: limits},
		Spec{Network: "kthcalm", Image: toolImage(t, "main")},
	)
	ns := newNetns(t, p.NetnsDir(), "kth-bounds")
	out, stderr, err := p.Exec(context.Background(), testCall("kthbounds", 0, "/opt/network/add", []string{ns, "0badaaaa-0000-4000-8000-000000000000", "eth0"}, nil))
	if err != nil {
		t.Fatalf("bounds add: %v\n%s", err, stderr)
	}
	var r map[string]string
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bounds add printed %q: %v", out, err)
	}
	t.Logf("bounds: %v", r)
	limitedCalls := callLimitsMissing() == ""
	if !limitedCalls {
		t.Logf("per-call limits not checked: %s (the container's bound its calls together)", callLimitsMissing())
	}
	if n, _ := strconv.Atoi(r["processes started"]); r["fork"] != "EAGAIN" || (limitedCalls && n >= int(limits.CallPids)) || n >= int(limits.Pids) {
		t.Errorf("fork: %s after %s processes; want EAGAIN before %d", r["fork"], r["processes started"], limits.CallPids)
	}
	if limitedCalls && !strings.Contains(string(stderr), "reached its task limit (64, limits.call_pids)") {
		t.Errorf("the call's stderr does not name its task limit: %s", stderr)
	}
	for dir, size := range map[string]int64{"/tmp": limits.Tmpfs, "/run": limits.Tmpfs, "/dev/shm": 64 << 20,
		"/": limits.WritableLayer, "/var/lib/cni": limits.StateDir} {
		var mib int64
		if _, err := fmt.Sscanf(r["fill "+dir], "ENOSPC after %d MiB", &mib); err != nil || mib > size>>20 {
			t.Errorf("fill %s: %s, want ENOSPC at %d MiB at most", dir, r["fill "+dir], size>>20)
		}
	}
	var stState, stHost unix.Stat_t
	if err := unix.Stat(p.pluginStateHostDir("kthbounds"), &stState); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p.opts.StateDir, &stHost); err != nil {
		t.Fatal(err)
	}
	if stState.Dev == stHost.Dev {
		t.Errorf("the network's state dir is on the state_dir's own filesystem")
	}
	if err := os.WriteFile(filepath.Join(p.opts.StateDir, "kt-after-fill"), []byte("x"), 0o600); err != nil {
		t.Errorf("the host's state dir after the fill: %v", err)
	}
	for _, c := range []struct{ hierarchy, file, want string }{
		{"pids", "pids.max", "400"}, {"memory", "memory.limit_in_bytes", strconv.Itoa(384 << 20)},
	} {
		path := filepath.Join("/sys/fs/cgroup", c.hierarchy, p.opts.CgroupParent, containerID(containerKey("kthbounds", 0)), c.file)
		if cgroups2() {
			path = filepath.Join("/sys/fs/cgroup", p.opts.CgroupParent, containerID(containerKey("kthbounds", 0)),
				map[string]string{"pids.max": "pids.max", "memory.limit_in_bytes": "memory.max"}[c.file])
		}
		if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != c.want {
			t.Errorf("the container's %s: %q, %v; want %s", path, b, err, c.want)
		}
	}

	_, stderr, err = p.Exec(context.Background(), testCall("kthhog", 0, "/opt/network/add", []string{ns, "0badbbbb-0000-4000-8000-000000000000", "eth0"}, nil))
	var ee *netplugin.ExecError
	if !errors.As(err, &ee) || ee.Signal != "SIGKILL" {
		t.Errorf("memory hog: %v, want killed (SIGKILL)\n%s", err, stderr)
	}
	if limitedCalls && !strings.Contains(string(stderr), "reached its memory limit (128 MiB, limits.call_memory)") {
		t.Errorf("the hog's stderr does not name its memory limit: %s", stderr)
	}
	stillServes(t, p, "kthbounds")
	stillServes(t, p, "kthhog")
	stillServes(t, p, "kthcalm")
}

// cgroups2 tells whether the host runs cgroup v2 alone.
func cgroups2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// callCgroupKind is the kind of call cgroups the agent of inst picked: v2
// where the container's unified cgroup has cgroup.kill, else the freezer.
func callCgroupKind(t *testing.T, inst *instance) string {
	t.Helper()
	st, err := inst.c.State()
	if err != nil {
		t.Fatal(err)
	}
	if path, ok := st.CgroupPaths[""]; ok {
		if _, err := os.Stat(filepath.Join(path, "cgroup.kill")); err == nil {
			return agent.CgroupV2
		}
	}
	return agent.CgroupFreezer
}
