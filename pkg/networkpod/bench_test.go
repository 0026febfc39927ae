package networkpod

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/internal/testutil"
)

// The three ways to run the same static binary (hosttool as "noop", which
// exits at once), so their difference is the cost of the way in:
//
//	BenchmarkDirectExec          os/exec on the host (the floor)
//	BenchmarkExec                Host.Exec through the exec agent
//	BenchmarkLibcontainerExec    a libcontainer exec per call (the naive way)
//
// Run with: go test -tags containers_image_openpgp -run '^$' -bench . ./pkg/networkpod/

func BenchmarkDirectExec(b *testing.B) {
	testutil.RequireRoot(b)
	img := toolImage(b, "main")
	noop := filepath.Join(img.Rootfs, "bin", "noop")
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	b.ResetTimer()
	for b.Loop() {
		cmd := exec.Command(noop)
		cmd.Stdin = bytes.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExec(b *testing.B) {
	p := newTestHost(b, nil)
	startGenerations(b, p, Spec{Network: "ktbench", Image: toolImage(b, "main")})
	ctx := context.Background()
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := p.Exec(ctx, testCall("ktbench", 0, "/bin/noop", []string{"/run/kurma/netns/x", "uuid", "eth0"}, stdin)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecParallel(b *testing.B) {
	p := newTestHost(b, nil)
	startGenerations(b, p, Spec{Network: "ktbench", Image: toolImage(b, "main")})
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := p.Exec(ctx, testCall("ktbench", 0, "/bin/noop", nil, nil)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkLibcontainerExec(b *testing.B) {
	p := newTestHost(b, nil)
	startGenerations(b, p, Spec{Network: "ktbench", Image: toolImage(b, "main")})
	n, err := p.lookup("ktbench", 0)
	if err != nil {
		b.Fatal(err)
	}
	inst, err := n.running()
	if err != nil {
		b.Fatal(err)
	}
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	b.ResetTimer()
	for b.Loop() {
		var out, errb bytes.Buffer
		proc := &libcontainer.Process{
			Args:   []string{"/bin/noop"},
			Env:    []string{defaultPath},
			Cwd:    "/",
			Stdin:  bytes.NewReader(stdin),
			Stdout: &out,
			Stderr: &errb,
		}
		if err := inst.c.Run(proc); err != nil {
			b.Fatal(err)
		}
		if _, err := proc.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// bridgeConf is the bridge + host-local config of the bridge benchmarks;
// dataDir "" means host-local's default (/var/lib/cni/networks, which is the
// per-network state dir inside the container).
func bridgeConf(dataDir string) []byte {
	ipam := `{"type":"host-local","subnet":"10.202.0.0/16"}`
	if dataDir != "" {
		ipam = fmt.Sprintf(`{"type":"host-local","subnet":"10.202.0.0/16","dataDir":%q}`, dataDir)
	}
	return []byte(`{"cniVersion":"1.0.0","name":"ktnbench","type":"bridge","bridge":"kt-host0","isGateway":true,"ipam":` + ipam + `}`)
}

func cleanupBridge(b *testing.B) {
	b.Cleanup(func() {
		if l, err := netlink.LinkByName("kt-host0"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
}

// One add and one del of the cni-netplugin image's wrapper + bridge +
// host-local per op, through the plugin host; BenchmarkBridgeAddDelDirect runs the
// same binaries on the host.
func BenchmarkBridgeAddDel(b *testing.B) {
	p := newTestHost(b, nil)
	cleanupBridge(b)
	conf := bridgeConf("")
	startGenerations(b, p, Spec{Network: "ktnbench", Image: netplugImage(b), Config: conf})
	ns := newNetns(b, p.NetnsDir(), "ktn-bench")
	ctx := context.Background()
	args := []string{ns, "ktn-bench", "eth0"}
	b.ResetTimer()
	for b.Loop() {
		if _, stderr, err := p.Exec(ctx, testCall("ktnbench", 0, "/opt/network/add", args, conf)); err != nil {
			b.Fatalf("add: %v %s", err, stderr)
		}
		if _, stderr, err := p.Exec(ctx, testCall("ktnbench", 0, "/opt/network/del", args, conf)); err != nil {
			b.Fatalf("del: %v %s", err, stderr)
		}
	}
}

func BenchmarkBridgeAddDelDirect(b *testing.B) {
	testutil.RequireRoot(b)
	cleanupBridge(b)
	img := netplugImage(b)
	dir := b.TempDir()
	conf := bridgeConf(filepath.Join(dir, "ipam"))
	nsDir := filepath.Join(dir, "ns")
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		b.Fatal(err)
	}
	ns := newNetns(b, nsDir, "ktn-bench")
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CNI_PATH=" + filepath.Join(img.Rootfs, "opt/cni/bin"),
		"KURMA_CNI_CACHE_DIR=" + filepath.Join(dir, "cache")}
	run := func(op string) {
		cmd := exec.Command(filepath.Join(img.Rootfs, "opt/network", op), ns, "ktn-bench", "eth0")
		cmd.Env = env
		cmd.Stdin = bytes.NewReader(conf)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v %s", op, err, errb.Bytes())
		}
	}
	b.ResetTimer()
	for b.Loop() {
		run("add")
		run("del")
	}
}

// BenchmarkCallView is what a call's view costs kurmad (callview.go): a
// mount namespace with one pod's netns, made and dropped.
func BenchmarkCallView(b *testing.B) {
	p := newTestHost(b, nil)
	startGenerations(b, p, Spec{Network: "ktbench", Image: toolImage(b, "main")})
	ns := newNetns(b, p.NetnsDir(), "ktb-view")
	n, err := p.lookup("ktbench", 0)
	if err != nil {
		b.Fatal(err)
	}
	inst, err := n.running()
	if err != nil {
		b.Fatal(err)
	}
	names := p.viewedNetns("/opt/network/add", []string{ns, "uuid", "eth0"})
	b.ResetTimer()
	for b.Loop() {
		v, err := p.makeCallView(inst.mntns, names)
		if err != nil {
			b.Fatal(err)
		}
		v.Close()
	}
}

// BenchmarkTrespassWatch is what the watch for trespasses costs kurmad per
// call (trespass.go): a call for one pod begun and ended, reading what the
// kernel queued meanwhile.
func BenchmarkTrespassWatch(b *testing.B) {
	p := newTestHost(b, nil)
	startGenerations(b, p, Spec{Network: "ktbench", Image: toolImage(b, "main")})
	ns := newNetns(b, p.NetnsDir(), "ktb-watch")
	names := p.viewedNetns("/opt/network/add", []string{ns, "uuid", "eth0"})
	b.ResetTimer()
	for b.Loop() {
		c := p.watch.begin(names, p.netnsInodes(names), false)
		p.watch.end(c)
	}
}
