package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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

// runGoBench runs the networkpod exec benchmarks (the exec-agent path vs a
// direct exec of the same static binary) and parses their ns/op.
func runGoBench(ctx context.Context, repo string, iterations int) ([]goBench, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-tags", "containers_image_openpgp", "-count=1",
		"-run", "^$", "-bench", "Exec", "-benchtime", fmt.Sprintf("%dx", iterations), "./pkg/networkpod/")
	cmd.Dir = repo
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	res := parseGoBench(out)
	if err != nil {
		return res, string(out), fmt.Errorf("go test -bench: %w", err)
	}
	return res, string(out), nil
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
