package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// wholeSide is one side of the whole-process comparison: the four commands
// a user types, run as processes.
type wholeSide struct {
	create, remove dist // kurmactl pod create / ip netns add + cnitool add
	sum            dist // one create+remove cycle
}

// wholeProcess is the section a new user would time: `kurmactl pod create`
// + `kurmactl pod rm` against `ip netns add` + `cnitool add` + `cnitool
// del` + `ip netns del`, the same bridge+host-local config and plugin
// binaries (the floor's), the two sides interleaved so that the load
// weighs on both alike.
func (b *bench) wholeProcess(d *daemon, fl *floor) error {
	o, ctx := b.o, b.ctx
	progress("whole processes: kurmactl vs ip netns + cnitool, %d cycles each", o.whole)
	cnitool, netconf, err := b.cnitoolSetup(fl)
	if err != nil {
		return err
	}
	kurmactl := filepath.Join(o.bin, "kurmactl")
	var k, c wholeSide
	for i := 0; i < o.whole+o.whole/5; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		kc, kr, err := kurmactlOnce(ctx, kurmactl, d.Socket, benchNets[0].Name)
		if err != nil {
			return err
		}
		cc, cr, err := cnitoolOnce(ctx, cnitool, netconf, filepath.Join(o.images, "bin"), benchNets[0].Name, fmt.Sprintf("kbench%d-%d", os.Getpid(), i))
		if err != nil {
			return err
		}
		if i < o.whole/5 {
			continue // warm-up: page cache, the daemon's connection pool
		}
		k.create, k.remove, k.sum = append(k.create, kc), append(k.remove, kr), append(k.sum, kc+kr)
		c.create, c.remove, c.sum = append(c.create, cc), append(c.remove, cr), append(c.sum, cc+cr)
	}
	t := &table{title: "whole processes: what a user runs, one pod at a time (ms)"}
	t.add(distRow("ip netns add + cnitool add", c.create))
	t.add(distRow("cnitool del + ip netns del", c.remove))
	t.add(distRow("ip netns + cnitool, add+del cycle", c.sum))
	t.add(vsFloor(distRow("kurmactl pod create", k.create), k.create, c.create, "netns+cnitool add", wholeGoal))
	t.add(vsFloor(distRow("kurmactl pod rm", k.remove), k.remove, c.remove, "cnitool del+netns", wholeGoal))
	t.add(vsFloor(distRow("kurmactl create+rm cycle", k.sum), k.sum, c.sum, "cycle", wholeGoal))
	t.note("kurmad at --log-level %s, as in the attach/detach rows", b.o.level)
	t.note("cnitool is built from the pinned github.com/containernetworking/cni module and runs the plugins of images/out/bin with the floor's config; `ip netns add` leaves lo down, kurmad brings it up")
	t.print(os.Stdout)
	return nil
}

// cnitoolSetup builds cnitool from the module's pinned libcni and writes
// the floor's plugin config where cnitool looks for it (NETCONFPATH).
func (b *bench) cnitoolSetup(fl *floor) (cnitool, netconf string, err error) {
	dir := filepath.Join(b.dir, "cnitool")
	netconf = filepath.Join(dir, "net.d")
	if err := os.MkdirAll(netconf, 0o700); err != nil {
		return "", "", err
	}
	cnitool = filepath.Join(dir, "cnitool")
	if err := testutil.GoBuild(dir, testutil.BuildOptions{}, "github.com/containernetworking/cni/cnitool"); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(netconf, "10-"+benchNets[0].Name+".conf"), fl.conf, 0o600); err != nil {
		return "", "", err
	}
	return cnitool, netconf, nil
}

// kurmactlOnce runs `kurmactl pod create --net network` and `kurmactl pod
// rm ID` and times each process.
func kurmactlOnce(ctx context.Context, kurmactl, socket, network string) (create, remove time.Duration, err error) {
	t0 := time.Now()
	out, err := runTool(ctx, nil, kurmactl, "--socket", socket, "-o", "json", "pod", "create", "--net", network)
	create = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	var pod struct{ ID string }
	if err := json.Unmarshal(out, &pod); err != nil || pod.ID == "" {
		return 0, 0, fmt.Errorf("kurmactl pod create printed no pod: %v: %s", err, out)
	}
	t1 := time.Now()
	_, err = runTool(ctx, nil, kurmactl, "--socket", socket, "pod", "rm", pod.ID)
	return create, time.Since(t1), err
}

// cnitoolOnce runs `ip netns add`, `cnitool add`, `cnitool del`, `ip netns
// del` for a netns called name, timing add and del with their netns steps.
func cnitoolOnce(ctx context.Context, cnitool, netconf, pluginDir, network, name string) (create, remove time.Duration, err error) {
	env := []string{"CNI_PATH=" + pluginDir, "NETCONFPATH=" + netconf, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	nsPath := filepath.Join("/run/netns", name)
	t0 := time.Now()
	if _, err := runTool(ctx, nil, "ip", "netns", "add", name); err != nil {
		return 0, 0, err
	}
	_, err = runTool(ctx, env, cnitool, "add", network, nsPath)
	create = time.Since(t0)
	if err != nil {
		_, _ = runTool(ctx, env, cnitool, "del", network, nsPath)
		_, _ = runTool(ctx, nil, "ip", "netns", "del", name)
		return 0, 0, err
	}
	t1 := time.Now()
	_, err = runTool(ctx, env, cnitool, "del", network, nsPath)
	if _, nsErr := runTool(ctx, nil, "ip", "netns", "del", name); err == nil {
		err = nsErr
	}
	return create, time.Since(t1), err
}

// runTool runs a command (with env, or the bench's when nil) and returns
// its stdout; a failure carries its stderr.
func runTool(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}
