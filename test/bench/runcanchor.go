package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// runcRuns is how many containers runcStartCPU runs.
const runcRuns = 20

// runcStartCPU is the anchor of the CPU per container start: the CPU of
// `runc run` (the runc on PATH, Debian's) of a container whose process is
// a static no-op binary, in a fresh bundle under dir, with the namespaces
// a plugin container has (no network or UTS namespace of its own), per
// run: runc's own process, its init's stages, the no-op and the
// container's teardown (wait4's usage of each run, its waited-for
// descendants included). It says what starting any container costs on
// this machine, before kurma's own processes (the agent, the main) run in
// it. An error when there is no runc.
func runcStartCPU(ctx context.Context, dir string) (dist, error) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("no runc on PATH: %w", err)
	}
	bundle := filepath.Join(dir, "runc-anchor")
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755); err != nil {
		return nil, err
	}
	if err := buildNoop(ctx, dir, filepath.Join(bundle, "rootfs", "noop")); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, runc, "spec", "-b", bundle).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %v: %s", err, out)
	}
	if err := editSpec(filepath.Join(bundle, "config.json")); err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "runc-root")
	var out dist
	for i := range runcRuns {
		cmd := exec.CommandContext(ctx, runc, "--root", root, "run", "-b", bundle, fmt.Sprintf("kurma-bench-anchor-%d", i))
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("runc run: %v: %s", err, b)
		}
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			return nil, fmt.Errorf("runc run: no rusage")
		}
		out = append(out, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()))
	}
	return out, nil
}

// buildNoop builds a static Go program that exits 0 at path.
func buildNoop(ctx context.Context, dir, path string) error {
	src := filepath.Join(dir, "noop-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"go.mod":  "module noop\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() {}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the no-op: %v: %s", err, out)
	}
	return nil
}

// editSpec makes runc's example spec run /noop without a terminal, on a
// read-only root, in the host's network and UTS namespaces (as a plugin
// container runs).
func editSpec(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	proc, _ := spec["process"].(map[string]any)
	linux, _ := spec["linux"].(map[string]any)
	root, _ := spec["root"].(map[string]any)
	if proc == nil || linux == nil || root == nil {
		return fmt.Errorf("%s: not runc's example spec", path)
	}
	proc["terminal"] = false
	proc["args"] = []string{"/noop"}
	root["readonly"] = true
	delete(spec, "hostname")
	nss, _ := linux["namespaces"].([]any)
	linux["namespaces"] = slices.DeleteFunc(nss, func(n any) bool {
		m, _ := n.(map[string]any)
		return m["type"] == "network" || m["type"] == "uts"
	})
	b, err = json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// runcVersion is the first line of `runc --version`'s version, or "?".
func runcVersion() string {
	out, err := exec.Command("runc", "--version").Output()
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(line, "runc version ")
}
