package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// netSpec is one bridge + host-local network of the bench's configs.
type netSpec struct {
	Name, Bridge, Subnet string
}

// entry is the network's pod_networks entry: the same CNI keys the floor
// gives libcni, plus kurma's own (name, aci, default, containerInterface).
func (n netSpec) entry(aci string) map[string]any {
	return map[string]any{
		"name": n.Name, "image": "file://" + aci, "default": true,
		"containerInterface": "eth{{num}}",
		"type":               "bridge", "bridge": n.Bridge, "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "subnet": n.Subnet},
	}
}

// config is a kurmad boot config for nets (without its dirs).
func config(aci string, nets []netSpec) map[string]any {
	list := make([]map[string]any, 0, len(nets))
	for _, n := range nets {
		list = append(list, n.entry(aci))
	}
	return map[string]any{"plugin_timeout": "30s", "pod_networks": list}
}

// daemon is one kurmad process of the bench (testutil.Kurmad) on its own
// state and run dirs under dir, with its pprof socket.
type daemon struct {
	*testutil.Kurmad
	nets      []netSpec
	pprofSock string
	pprof     *http.Client
}

// newDaemon writes the config for nets under dir (which must be short:
// the API socket lives there).
func newDaemon(bin, dir, aci string, nets []netSpec) (*daemon, error) {
	k, err := testutil.NewKurmad(bin, dir)
	if err != nil {
		return nil, err
	}
	d := &daemon{Kurmad: k, nets: nets, pprofSock: filepath.Join(dir, "pprof.sock")}
	// Each boot starts every container (the boot rows' warm boots);
	// bootToReady clears it for the boots that adopt them.
	k.StopPlugins = true
	k.Env = []string{"KURMAD_PPROF_SOCKET=" + d.pprofSock}
	cfg := config(aci, nets)
	cfg["metrics_listen"] = filepath.Join(dir, "metrics.sock") // for journalSyncs
	if err := k.WriteConfig(cfg); err != nil {
		return nil, err
	}
	d.pprof = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", d.pprofSock)
		},
	}}
	return d, nil
}

// waitReady waits until kurmad is ready with every network running and
// returns the time since the process was started.
func (d *daemon) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	names := make([]string, 0, len(d.nets))
	for _, n := range d.nets {
		names = append(names, n.Name)
	}
	return d.WaitReady(ctx, timeout, names)
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
