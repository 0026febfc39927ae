package networkpod

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/opencontainers/runc/libcontainer"

	"github.com/kurma-project/kurma/internal/testutil"
)

// The three ways to run the same static binary (npodtool as "noop", which
// exits at once), so their difference is the cost of the way in:
//
//	BenchmarkDirectExec          os/exec on the host (the floor)
//	BenchmarkExec                Pod.Exec through the exec agent
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
	p := newTestPod(b, nil)
	startPod(b, p, Spec{Name: "ktbench", Image: toolImage(b, "main")})
	ctx := context.Background()
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := p.Exec(ctx, "ktbench", "/bin/noop", []string{"/run/kurma/netns/x", "uuid", "eth0"}, stdin); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecParallel(b *testing.B) {
	p := newTestPod(b, nil)
	startPod(b, p, Spec{Name: "ktbench", Image: toolImage(b, "main")})
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := p.Exec(ctx, "ktbench", "/bin/noop", nil, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkLibcontainerExec(b *testing.B) {
	p := newTestPod(b, nil)
	startPod(b, p, Spec{Name: "ktbench", Image: toolImage(b, "main")})
	n, err := p.lookup("ktbench")
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
