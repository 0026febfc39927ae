package testutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// KurmadReadyLine is in the line kurmad logs (at info level) once it serves
// its API: every network had its first start attempt and the journal is
// reconciled. Kurmad.WaitReady waits for it.
const KurmadReadyLine = "kurmad ready"

// Kurmad is one real kurmad process on its own config, state and run dirs,
// for the end-to-end tests and the bench: start it, wait until it is ready,
// talk to it, stop, kill -9 or restart it, read its log, find what it left,
// and clean up every kernel object it made.
type Kurmad struct {
	Bin string // the kurmad binary; kurma-agent and kurma-init must sit beside it

	// Dir holds everything below; keep it short, the API socket is there.
	Dir, StateDir, RunDir, Socket, Config, LogPath string

	// CgroupParent is the config's cgroup_parent, when the test sets one;
	// "" is kurmad's default for RunDir (CgroupParent).
	CgroupParent string

	LogLevel string // --log-level; "" is info, the least that logs the ready line
	LogJSON  bool   // --log-json
	// StopPlugins starts kurmad with --stop-plugins: Stop's SIGTERM then
	// stops its plugin containers too, else they run on for the next
	// start to adopt.
	StopPlugins bool
	Env         []string // added to the environment of every start
	// Wrap is a command kurmad is started under, such as
	// {"nsenter", "--net=PATH"} (a node's network namespace); it must
	// exec kurmad in its place.
	Wrap []string

	Client *api.Client

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	lines   *Lines   // what kurmad writes, on its way to LogPath
	logw    *os.File // our end for writing into kurmad's log pipe (SyncLog)
	syncs   int
	ready   <-chan struct{}
	started time.Time
}

// NewKurmad makes dir and returns a Kurmad for bin with its paths there.
// Nothing runs until Start.
func NewKurmad(bin, dir string) (*Kurmad, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	k := &Kurmad{Bin: bin, Dir: dir,
		StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"),
		Socket: filepath.Join(dir, "kurmad.sock"), Config: filepath.Join(dir, "kurmad.json"),
		LogPath: filepath.Join(dir, "kurmad.log"),
	}
	k.Client = api.NewClient(k.Socket)
	return k, nil
}

// WriteConfig writes cfg as kurmad's config file, with state_dir and
// run_dir set to k's unless cfg names its own.
func (k *Kurmad) WriteConfig(cfg map[string]any) error {
	full := map[string]any{"state_dir": k.StateDir, "run_dir": k.RunDir}
	maps.Copy(full, cfg)
	data, err := json.MarshalIndent(full, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(k.Config, data, 0o600)
}

// Start launches kurmad, with extraEnv added to its environment, in its own
// process group (a ^C meant for the test or bench does not reach it). Its
// stdout and stderr are appended to LogPath. Start again after it exited is
// a restart on the same dirs.
func (k *Kurmad) Start(extraEnv ...string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.runningLocked() {
		return errors.New("kurmad already running")
	}
	logf, err := os.OpenFile(k.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== kurmad start %s env=%v\n", time.Now().Format(time.RFC3339Nano), extraEnv)
	// Our own pipe, not an io.Writer as cmd.Stderr: Wait then returns when
	// kurmad exits even while a process it started still holds the pipe.
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return err
	}
	lines := NewLines(logf)
	ready := lines.Expect(KurmadReadyLine)
	level := k.LogLevel
	if level == "" {
		level = "info"
	}
	args := []string{"--config", k.Config, "--socket", k.Socket, "--log-level", level}
	if k.LogJSON {
		args = append(args, "--log-json")
	}
	if k.StopPlugins {
		args = append(args, "--stop-plugins")
	}
	argv := append(append(append([]string(nil), k.Wrap...), k.Bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Env = append(append(os.Environ(), k.Env...), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		logf.Close()
		return fmt.Errorf("start %s: %w", k.Bin, err)
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(lines, pr)
		lines.Close()
		pr.Close()
		logf.Close()
		close(copied)
	}()
	exited := make(chan struct{})
	k.cmd, k.exited, k.exitErr, k.lines, k.logw, k.ready, k.started = cmd, exited, nil, lines, pw, ready, started
	go func() {
		err := cmd.Wait()
		k.mu.Lock()
		k.logw = nil
		k.mu.Unlock()
		pw.Close()
		// The log is whole once the pipe is drained: its last lines (a
		// failpoint's, say) may still be in it when Wait returns. Only a
		// process that inherited the pipe could keep it open; then the
		// log is as whole as it gets after a moment.
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
		k.mu.Lock()
		k.exitErr = err
		k.mu.Unlock()
		close(exited)
	}()
	return nil
}

// SyncLog returns once everything the running kurmad logged so far is in
// LogPath: its log reaches the file through a pipe, so SyncLog writes a
// marker line into that pipe and waits for it to come out. With no kurmad
// running the log is already whole.
func (k *Kurmad) SyncLog(timeout time.Duration) error {
	k.mu.Lock()
	if !k.runningLocked() || k.logw == nil {
		k.mu.Unlock()
		return nil
	}
	k.syncs++
	marker := fmt.Sprintf("==== log sync %d", k.syncs)
	seen, w := k.lines.Expect(marker), k.logw
	k.mu.Unlock()
	if _, err := fmt.Fprintln(w, marker); err != nil {
		if !k.Running() {
			return nil
		}
		return err
	}
	select {
	case <-seen:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("kurmad's log pipe did not pass a marker within %v", timeout)
	}
}

// WaitReady waits for the ready line of the kurmad Start launched, then
// until every network in networks is running (normally at once: a network
// whose first start failed is retried with backoff), and returns how long
// that took since the process started. It fails at once when kurmad exits.
func (k *Kurmad) WaitReady(ctx context.Context, timeout time.Duration, networks []string) (time.Duration, error) {
	k.mu.Lock()
	ready, exited, started := k.ready, k.exited, k.started
	k.mu.Unlock()
	if exited == nil {
		return 0, errors.New("kurmad was not started")
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-exited:
		return 0, fmt.Errorf("kurmad exited during boot (%v); log %s:\n%s", k.ExitErr(), k.LogPath, k.LogTail(30))
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-timer.C:
		return 0, fmt.Errorf("kurmad did not log %q within %v; log %s:\n%s", KurmadReadyLine, timeout, k.LogPath, k.LogTail(30))
	}
	err := Poll(ctx, timeout, "kurmad's networks to run", func() error {
		select {
		case <-exited:
			return fmt.Errorf("kurmad exited (%v)", k.ExitErr())
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		nets, err := k.Client.Networks(cctx)
		if err != nil {
			return err
		}
		if idle := notRunning(nets, networks); len(idle) > 0 {
			return fmt.Errorf("not running: %s", strings.Join(idle, ", "))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w; log %s:\n%s", err, k.LogPath, k.LogTail(30))
	}
	return time.Since(started), nil
}

// notRunning lists the networks of want that nets does not show running,
// with the state and reason it shows (of its newest generation, listed
// first, unless another one runs).
func notRunning(nets []api.Generation, want []string) []string {
	byName := map[string]api.Generation{}
	for _, n := range nets {
		if prev, seen := byName[n.Network]; !seen || prev.State != api.StateRunning && n.State == api.StateRunning {
			byName[n.Network] = n
		}
	}
	var out []string
	for _, w := range want {
		n, ok := byName[w]
		switch {
		case !ok:
			out = append(out, w+" (not listed)")
		case n.State != api.StateRunning:
			out = append(out, fmt.Sprintf("%s (%s: %s)", w, n.State, n.Reason))
		}
	}
	return out
}

// Running tells whether the process Start launched has not exited.
func (k *Kurmad) Running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.runningLocked()
}

func (k *Kurmad) runningLocked() bool {
	if k.cmd == nil {
		return false
	}
	select {
	case <-k.exited:
		return false
	default:
		return true
	}
}

// Pid is the process's id, 0 before Start.
func (k *Kurmad) Pid() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil || k.cmd.Process == nil {
		return 0
	}
	return k.cmd.Process.Pid
}

// ExitErr is how the last process exited (nil: status 0, or still running).
func (k *Kurmad) ExitErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.exitErr
}

// Stop sends SIGTERM and waits for the exit (and the end of its log); after grace it kills the whole
// process group (a stuck container init goes too). It returns an error when
// kurmad did not exit 0 on its own.
func (k *Kurmad) Stop(grace time.Duration) error {
	k.mu.Lock()
	cmd, exited := k.cmd, k.exited
	running := k.runningLocked()
	k.mu.Unlock()
	if !running {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
		if err := k.ExitErr(); err != nil {
			return fmt.Errorf("kurmad exited with %v after SIGTERM", err)
		}
		return nil
	case <-timer.C:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("kurmad did not exit %v after SIGTERM; killed", grace)
	}
}

// Kill kills kurmad alone with SIGKILL, as a crash would (its plugin
// containers stay), and waits for it. A kurmad that was not running is an
// error: a crash test must not go on as if its crash happened.
func (k *Kurmad) Kill() error {
	k.mu.Lock()
	cmd, exited := k.cmd, k.exited
	running := k.runningLocked()
	k.mu.Unlock()
	if !running {
		return errors.New("kurmad was not running: nothing to kill")
	}
	if err := cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill kurmad: %w", err)
	}
	<-exited
	return nil
}

// WaitExit waits up to timeout for kurmad to exit on its own.
func (k *Kurmad) WaitExit(timeout time.Duration) error {
	k.mu.Lock()
	exited := k.exited
	k.mu.Unlock()
	if exited == nil {
		return errors.New("kurmad was not started")
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-exited:
		return nil
	case <-timer.C:
		return fmt.Errorf("kurmad still running after %v", timeout)
	}
}

// Log is everything kurmad logged so far, every start of it.
func (k *Kurmad) Log() string {
	data, _ := os.ReadFile(k.LogPath)
	return string(data)
}

// LogTail is the last n lines of the log.
func (k *Kurmad) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(k.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RemoveAllPods deletes every pod kurmad lists.
func (k *Kurmad) RemoveAllPods(ctx context.Context) error {
	pods, err := k.Client.ListPods(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pods {
		if err := k.Client.DeletePod(ctx, p.ID); err != nil && !api.IsCode(err, api.CodeNotFound) {
			errs = append(errs, fmt.Errorf("delete pod %s: %w", p.ID, err))
		}
	}
	return errors.Join(errs...)
}

// PodObjects is what pods hold on the host, by kind, as found by
// Kurmad.PodObjects.
type PodObjects struct {
	NetnsFiles []string // in <run_dir>/netns
	PodDirs    []string // in <run_dir>/pods
	Leases     []string // host-local's IP files under the state dir
	Veths      []string // on the bridges asked about
}

// PodObjects lists what pods of k hold now: netns files, pod dirs,
// host-local leases, and veths on bridges. With no pod, all are empty.
func (k *Kurmad) PodObjects(bridges []string) PodObjects {
	var o PodObjects
	for _, sub := range []string{"netns", "pods"} {
		entries, _ := os.ReadDir(filepath.Join(k.RunDir, sub))
		for _, e := range entries {
			p := filepath.Join(k.RunDir, sub, e.Name())
			if sub == "netns" {
				o.NetnsFiles = append(o.NetnsFiles, p)
			} else {
				o.PodDirs = append(o.PodDirs, p)
			}
		}
	}
	o.Leases = HostLocalLeases(k.StateDir)
	o.Veths = BridgeVeths(bridges)
	return o
}

// List is every object, each with its kind.
func (o PodObjects) List() []string {
	var out []string
	for _, g := range []struct {
		kind  string
		items []string
	}{{"netns file", o.NetnsFiles}, {"pod dir", o.PodDirs}, {"host-local lease", o.Leases}, {"veth", o.Veths}} {
		for _, it := range g.items {
			if g.kind == "host-local lease" {
				// A lease file holds its owner (container ID and ifname):
				// the pod that leaked it.
				if owner, err := os.ReadFile(it); err == nil && len(owner) > 0 {
					it += " (held by " + strings.ReplaceAll(string(owner), "\n", " ") + ")"
				}
			}
			out = append(out, g.kind+" "+it)
		}
	}
	return out
}

// CgroupDirs lists every directory of k's plugin-container cgroup subtree,
// in every hierarchy, parents first.
func (k *Kurmad) CgroupDirs() []string { return cgroupDirs(k.cgroupParent()) }

// cgroupParent is the cgroup parent of k's plugin containers.
func (k *Kurmad) cgroupParent() string {
	if k.CgroupParent != "" {
		return k.CgroupParent
	}
	return CgroupParent(k.RunDir)
}

// Mounts lists the mount points under Dir (the netns dir, the plugin
// containers' rootfs and state mounts, pods' netns files), deepest last.
func (k *Kurmad) Mounts() []string { return MountsUnder(k.Dir) }

// Processes lists the live processes that belong to k, and only to k:
// kurmad itself and any process whose command line names a path under Dir
// (a plugin's child that names its pod's netns file, as cnitest's hanging
// child does), and whatever runs in its plugin containers' cgroups.
// Another test's processes are never listed. Zombies are left out: they hold nothing but a
// pid until their parent reaps them.
func (k *Kurmad) Processes() []string {
	return ProcessesWhere(k.owns)
}

// owns tells whether a process (its command line and /proc/<pid>/cgroup)
// is one of k's. A path under Dir is matched with its slash: another
// test's dir may begin with this one's name (os.MkdirTemp's "/tmp/kte-12"
// and "/tmp/kte-123").
func (k *Kurmad) owns(cmdline, cgroup string) bool {
	return strings.Contains(cmdline, k.Dir+"/") || strings.Contains(cgroup, "/"+k.cgroupParent()+"/")
}

// Cleanup removes what a kurmad on k's dirs can leave: it stops the process
// if it runs (SIGTERM, then SIGKILL of its group after grace), kills what
// still runs in its plugin containers' cgroups and removes them, kills
// every other process of k's (see Processes), and unmounts everything
// under Dir (pods' netns files among them, so their veths go with their
// namespaces). Dir itself and bridges are the caller's. It reports nothing
// about what it killed: leaks are the tests' checks to report; Cleanup
// makes sure none outlives its test.
func (k *Kurmad) Cleanup(grace time.Duration) error {
	var errs []error
	if err := k.Stop(grace); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(k.cgroupParent()); err != nil {
		errs = append(errs, err)
	}
	if err := KillProcessesWhere(k.owns); err != nil {
		errs = append(errs, err)
	}
	UnmountUnder(k.Dir)
	if ms := MountsUnder(k.Dir); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("still mounted under %s: %v", k.Dir, ms))
	}
	return errors.Join(errs...)
}
