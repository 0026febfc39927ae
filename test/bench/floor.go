package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// floor calls the very plugin binaries that go into the image (images/out/bin)
// through libcni directly: what kurma costs is measured against this.
type floor struct {
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	conf []byte // the plugin config libcni gets (host-local dataDir under dir)
	dir  string // netns files, ipam data, libcni cache
}

// newFloor builds the libcni config from the same pod_networks entry kurmad
// gets (netconfig turns it into the plugin's stdin), with host-local's
// dataDir moved under dir.
func newFloor(pluginDir, aci, dir string, n netSpec) (*floor, error) {
	full := config(aci, []netSpec{n})
	full["state_dir"], full["run_dir"] = filepath.Join(dir, "unused-state"), filepath.Join(dir, "unused-run")
	data, err := json.Marshal(full)
	if err != nil {
		return nil, err
	}
	cfg, err := netconfig.Parse(data, dir)
	if err != nil {
		return nil, err
	}
	net, ok := cfg.Network(n.Name)
	if !ok {
		return nil, fmt.Errorf("network %q missing from its own config", n.Name)
	}
	conf, err := net.PluginConfig(nil)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		return nil, err
	}
	ipam, _ := m["ipam"].(map[string]any)
	if ipam == nil {
		return nil, errors.New("plugin config has no ipam")
	}
	ipam["dataDir"] = filepath.Join(dir, "ipam", "networks")
	if conf, err = json.Marshal(m); err != nil {
		return nil, err
	}
	pc, err := libcni.ConfFromBytes(conf)
	if err != nil {
		return nil, err
	}
	list, err := libcni.ConfListFromConf(pc)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"netns", "cache", "ipam"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	return &floor{
		cni:  libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, filepath.Join(dir, "cache"), nil),
		list: list,
		conf: conf,
		dir:  dir,
	}, nil
}

// floorSample is one iteration's timings.
type floorSample struct {
	netns, add, del, rmNetns time.Duration
}

// once creates a netns (with lo up, as kurmad does), adds and deletes the
// network in it, and removes the netns, timing each step.
func (f *floor) once(ctx context.Context, i int) (floorSample, error) {
	var s floorSample
	path := filepath.Join(f.dir, "netns", fmt.Sprintf("f%d", i))
	t0 := time.Now()
	if err := netnsfile.Create(path); err != nil {
		return s, err
	}
	if err := netnsfile.LoopbackUp(path); err != nil {
		_ = netnsfile.Remove(path)
		return s, err
	}
	s.netns = time.Since(t0)
	rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("kurma-bench-floor-%d", i), NetNS: path, IfName: "eth0"}
	t1 := time.Now()
	_, err := f.cni.AddNetworkList(ctx, f.list, rt)
	s.add = time.Since(t1)
	if err != nil {
		_ = f.cni.DelNetworkList(context.Background(), f.list, rt)
		_ = netnsfile.Remove(path)
		return s, fmt.Errorf("floor add: %w", err)
	}
	t2 := time.Now()
	err = f.cni.DelNetworkList(ctx, f.list, rt)
	s.del = time.Since(t2)
	if err != nil {
		_ = netnsfile.Remove(path)
		return s, fmt.Errorf("floor del: %w", err)
	}
	t3 := time.Now()
	err = netnsfile.Remove(path)
	s.rmNetns = time.Since(t3)
	return s, err
}

// wrapperOnce does what once does through the image's cni-wrapper binary
// run on the host (no container, no exec agent): the cost of the wrapper's
// own process on top of libcni.
func (f *floor) wrapperOnce(ctx context.Context, wrapper, pluginDir string, i int) (add, del time.Duration, err error) {
	path := filepath.Join(f.dir, "netns", fmt.Sprintf("w%d", i))
	if err := netnsfile.Create(path); err != nil {
		return 0, 0, err
	}
	defer netnsfile.Remove(path)
	if err := netnsfile.LoopbackUp(path); err != nil {
		return 0, 0, err
	}
	id := fmt.Sprintf("kurma-bench-wrap-%d", i)
	call := func(verb string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, wrapper, verb, path, id, "eth0")
		cmd.Env = []string{"CNI_PATH=" + pluginDir, "KURMA_CNI_CACHE_DIR=" + filepath.Join(f.dir, "wrapper-cache"), "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Stdin = bytes.NewReader(f.conf)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("cni-wrapper %s: %v: %s", verb, err, out)
		}
		return time.Since(t0), nil
	}
	if add, err = call("add"); err != nil {
		_, _ = call("del")
		return 0, 0, err
	}
	del, err = call("del")
	return add, del, err
}

// floorCycles runs total floor iterations with conc workers at a time
// (indexes from offset on, so netns names and container ids are unique).
func floorCycles(ctx context.Context, f *floor, total, conc, offset int) (cycleResult, error) {
	var (
		res   cycleResult
		mu    sync.Mutex
		next  atomic.Int64
		wg    sync.WaitGroup
		first error
	)
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(total) {
					return
				}
				s, err := f.once(ctx, offset+int(i))
				mu.Lock()
				if err != nil {
					res.failures++
					if first == nil {
						first = err
					}
				} else {
					res.creates = append(res.creates, s.netns+s.add)
					res.deletes = append(res.deletes, s.del+s.rmNetns)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, first
}

// hold makes n floor pods that stay (netns + add, indexes from base on),
// with conc workers, and returns the indexes it made (also on error), for
// release.
func (f *floor) hold(ctx context.Context, base, n, conc int) ([]int, error) {
	var (
		mu    sync.Mutex
		made  []int
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				err := f.add(ctx, base+i)
				mu.Lock()
				if err == nil {
					made = append(made, base+i)
				} else if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return made, first
}

// release dels and removes the floor pods hold made, with conc workers.
func (f *floor) release(ctx context.Context, held []int, conc int) error {
	var (
		mu    sync.Mutex
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(held) {
					return
				}
				path, rt := f.pod(held[i])
				err := errors.Join(f.cni.DelNetworkList(ctx, f.list, rt), netnsfile.Remove(path))
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("floor pod %d: %w", held[i], err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

// add makes floor pod i: its netns with lo up, and the network added.
func (f *floor) add(ctx context.Context, i int) error {
	path, rt := f.pod(i)
	if err := netnsfile.Create(path); err != nil {
		return err
	}
	if err := netnsfile.LoopbackUp(path); err != nil {
		return errors.Join(err, netnsfile.Remove(path))
	}
	if _, err := f.cni.AddNetworkList(ctx, f.list, rt); err != nil {
		return errors.Join(fmt.Errorf("floor add: %w", err), f.cni.DelNetworkList(context.WithoutCancel(ctx), f.list, rt), netnsfile.Remove(path))
	}
	return nil
}

// pod is floor pod i's netns path and libcni runtime config.
func (f *floor) pod(i int) (string, *libcni.RuntimeConf) {
	path := filepath.Join(f.dir, "netns", fmt.Sprintf("f%d", i))
	return path, &libcni.RuntimeConf{ContainerID: fmt.Sprintf("kurma-bench-floor-%d", i), NetNS: path, IfName: "eth0"}
}
