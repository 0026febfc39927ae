package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// goBench is one result line of `go test -bench`.
type goBench struct {
	name  string // without the -GOMAXPROCS suffix
	n     int
	perOp time.Duration
}

// goBenchNames are the networkpod benchmarks the bench runs: the exec
// agent's path against a direct exec of the same static binary, a call's
// view (made and dropped, per call) and the watch for trespasses (a call
// begun and ended).
var goBenchNames = []string{"DirectExec", "Exec", "ExecParallel", "LibcontainerExec", "CallView", "TrespassWatch"}

// goBenchRounds is how many times each benchmark runs, a process each,
// the benchmarks' order reversed every other round so that each sees the
// same load as the others.
const goBenchRounds = 3

// runGoBench compiles the networkpod tests into dir once, runs each of
// goBenchNames goBenchRounds times, interleaved, iterations/goBenchRounds
// iterations a run, and returns per benchmark the median of its runs'
// ns/op and its iterations in all.
func runGoBench(ctx context.Context, repo, dir string, iterations int) ([]goBench, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "networkpod.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "containers_image_openpgp", "-o", bin, "./pkg/networkpod/")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, string(out), fmt.Errorf("go test -c: %w", err)
	}
	per := map[string]dist{}
	ops := map[string]int{}
	var all []byte
	for r := range goBenchRounds {
		order := slices.Clone(goBenchNames)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, nm := range order {
			cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", "^Benchmark"+nm+"$",
				"-test.benchtime", fmt.Sprintf("%dx", max(iterations/goBenchRounds, 1)))
			cmd.Dir = filepath.Join(repo, "pkg", "networkpod") // as go test runs it
			cmd.Env = os.Environ()
			out, err := cmd.CombinedOutput()
			all = append(all, out...)
			if err != nil {
				return nil, string(all), fmt.Errorf("%s: %w", nm, err)
			}
			for _, g := range parseGoBench(out) {
				per[g.name] = append(per[g.name], g.perOp)
				ops[g.name] += g.n
			}
		}
	}
	var res []goBench
	for _, nm := range goBenchNames {
		if d := per["Benchmark"+nm]; len(d) > 0 {
			res = append(res, goBench{name: "Benchmark" + nm, n: ops["Benchmark"+nm], perOp: d.median()})
		}
	}
	return res, string(all), nil
}

func parseGoBench(out []byte) []goBench {
	var res []goBench
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		n, err1 := strconv.Atoi(f[1])
		ns, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		nm := f[0]
		if i := strings.LastIndex(nm, "-"); i > 0 {
			if _, err := strconv.Atoi(nm[i+1:]); err == nil {
				nm = nm[:i]
			}
		}
		res = append(res, goBench{name: nm, n: n, perOp: time.Duration(ns)})
	}
	return res
}
