package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
)

// netSpec is one bridge + host-local network of the bench's configs.
type netSpec struct {
	Name, Bridge, Subnet string
}

// entry is the network's pod_networks entry: the same CNI keys the floor
// gives libcni, plus kurma's own (name, aci, default, containerInterface).
func (n netSpec) entry(aci string) map[string]any {
	return map[string]any{
		"name": n.Name, "aci": "file://" + aci, "default": true,
		"containerInterface": "eth{{num}}",
		"type":               "bridge", "bridge": n.Bridge, "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "subnet": n.Subnet},
	}
}

// configJSON is a kurmad boot config for nets.
func configJSON(stateDir, runDir, aci string, nets []netSpec, extra map[string]any) ([]byte, error) {
	cfg := map[string]any{"state_dir": stateDir, "run_dir": runDir, "plugin_timeout": "30s"}
	for k, v := range extra {
		cfg[k] = v
	}
	list := make([]map[string]any, 0, len(nets))
	for _, n := range nets {
		list = append(list, n.entry(aci))
	}
	cfg["pod_networks"] = list
	return json.MarshalIndent(cfg, "", "  ")
}

// daemon is one kurmad process on its own state and run dirs under dir.
type daemon struct {
	bin                                   string // kurmad (kurma-agent beside it)
	dir, stateDir, runDir, socket, config string
	logPath, pprofSock                    string
	logLevel                              string // "" → warn
	nets                                  []netSpec
	client                                *api.Client
	pprof                                 *http.Client

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	started time.Time
}

// newDaemon writes the config for nets under dir (which must be short:
// the API socket lives there).
func newDaemon(bin, dir, aci string, nets []netSpec) (*daemon, error) {
	d := &daemon{bin: bin, dir: dir, nets: nets,
		stateDir: filepath.Join(dir, "state"), runDir: filepath.Join(dir, "run"),
		socket: filepath.Join(dir, "api.sock"), config: filepath.Join(dir, "kurmad.json"),
		logPath: filepath.Join(dir, "kurmad.log"), pprofSock: filepath.Join(dir, "pprof.sock"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	data, err := configJSON(d.stateDir, d.runDir, aci, nets, nil)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(d.config, data, 0o600); err != nil {
		return nil, err
	}
	d.client = api.NewClient(d.socket)
	d.pprof = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", d.pprofSock)
		},
	}}
	return d, nil
}

// start launches kurmad in its own process group (a ^C on the bench must
// not reach it: the bench deletes its pods before stopping it).
func (d *daemon) start(extraEnv ...string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		return errors.New("kurmad already started")
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== kurmad start %s\n", time.Now().Format(time.RFC3339Nano))
	level := d.logLevel
	if level == "" {
		level = "warn"
	}
	cmd := exec.Command(d.bin, "--config", d.config, "--socket", d.socket, "--log-level", level, "--log-json")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), append([]string{"KURMAD_PPROF_SOCKET=" + d.pprofSock}, extraEnv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.bin, err)
	}
	d.cmd = cmd
	d.exited = make(chan struct{})
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		d.exitErr = err
		d.mu.Unlock()
		close(d.exited)
	}()
	return nil
}

func (d *daemon) running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// waitReady polls GET /v1/networks until every network runs and returns
// the time since the process was started.
func (d *daemon) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		if !d.running() {
			return 0, fmt.Errorf("kurmad exited during boot (%v); log: %s\n%s", d.exitErr, d.logPath, d.logTail(20))
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		nets, err := d.client.Networks(cctx)
		cancel()
		if err == nil && allRunning(nets, d.nets) {
			return time.Since(d.started), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("kurmad not ready after %v (last: %v %+v); log: %s\n%s", timeout, err, nets, d.logPath, d.logTail(20))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allRunning(got []api.Network, want []netSpec) bool {
	state := map[string]string{}
	for _, n := range got {
		state[n.Name] = n.State
	}
	for _, w := range want {
		if state[w.Name] != api.StateRunning {
			return false
		}
	}
	return true
}

// removeAllPods deletes every pod kurmad lists.
func (d *daemon) removeAllPods(ctx context.Context) error {
	pods, err := d.client.ListPods(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pods {
		if err := d.client.DeletePod(ctx, p.ID); err != nil && !api.IsCode(err, api.CodeNotFound) {
			errs = append(errs, fmt.Errorf("delete pod %s: %w", p.ID, err))
		}
	}
	return errors.Join(errs...)
}

// stop sends SIGTERM and waits, then SIGKILL (the process group, so a
// stuck container init goes too) after grace.
func (d *daemon) stop(grace time.Duration) error {
	if !d.running() {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.exitErr != nil {
			return fmt.Errorf("kurmad exited with %v after SIGTERM", d.exitErr)
		}
		return nil
	case <-time.After(grace):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.exited
		return fmt.Errorf("kurmad did not exit %v after SIGTERM; killed", grace)
	}
}

// reset forgets the exited process so start can run again.
func (d *daemon) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cmd, d.exited, d.exitErr = nil, nil, nil
}

func (d *daemon) logTail(n int) string {
	data, err := os.ReadFile(d.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procStatus reads VmRSS (KiB) and Threads of pid from /proc.
func procStatus(pid int) (rssKiB, threads int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			rssKiB, _ = strconv.ParseInt(fields[0], 10, 64)
		case "Threads":
			threads, _ = strconv.ParseInt(fields[0], 10, 64)
		}
	}
	return rssKiB, threads, sc.Err()
}

// goroutines asks kurmad's pprof socket (KURMAD_PPROF_SOCKET, see
// cmd/kurmad/profile.go) for its goroutine count, and how many of them
// serve an HTTP connection (idle keep-alive connections of the bench's
// clients hold one each until the client closes them).
func (d *daemon) goroutines(ctx context.Context) (total, httpConns int, err error) {
	body, err := d.pprofGet(ctx, "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, 0, err
	}
	blocks := strings.Split(string(body), "\n\n")
	// "goroutine profile: total 42"
	header, _, _ := strings.Cut(blocks[0], "\n")
	i := strings.LastIndex(header, "total ")
	if i < 0 {
		return 0, 0, fmt.Errorf("unexpected goroutine profile header %q", header)
	}
	if total, err = strconv.Atoi(strings.TrimSpace(header[i+len("total "):])); err != nil {
		return 0, 0, err
	}
	for _, b := range blocks {
		if !strings.Contains(b, "net/http.(*conn).serve") {
			continue
		}
		lines := strings.Split(b, "\n")
		for _, l := range lines {
			// "16 @ 0x4... 0x4..."
			if n, rest, ok := strings.Cut(l, " @ "); ok && rest != "" {
				if c, err := strconv.Atoi(n); err == nil {
					httpConns += c
				}
				break
			}
		}
	}
	return total, httpConns, nil
}

// cpuProfile records kurmad's CPU profile for d into path.
func (d *daemon) cpuProfile(ctx context.Context, dur time.Duration, path string) error {
	body, err := d.pprofGet(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(dur.Seconds())))
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o600)
}

func (d *daemon) pprofGet(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://kurmad"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.pprof.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kurmad pprof socket %s (needs cmd/kurmad/profile.go): %w", d.pprofSock, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pprof %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}
