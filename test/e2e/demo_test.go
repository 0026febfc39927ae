package e2e

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// TestMakeDemo runs README's `make demo` twice in a row, as a new user
// would, and finds the host as it was before: the same nft tables, links,
// mounts, cgroups, the same entries in the dirs the demo uses (no state or
// run dir, no log left), the same IP forwarding. Each run says it left
// nothing, step by step, and waits for the network its pods join.
func TestMakeDemo(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make: %v", err)
	}
	before := hostSnapshot(t)
	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "demo")
		cmd.Dir = testutil.RepoRoot()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("make demo (run %d): %v\n%s", run, err, &out)
		}
		for _, want := range []string{"== [1/10] building kurmad", "ready: kurmad serves and network mynet runs",
			"64 bytes from 10.10.", "== [10/10] what is left", "nft tables the demo made", "demo finished: nothing left behind"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("make demo (run %d) did not say %q:\n%s", run, want, &out)
			}
		}
		if strings.Contains(out.String(), "flanneld") {
			t.Errorf("make demo (run %d) built flanneld, which only Kubernetes runs:\n%s", run, &out)
		}
		after := hostSnapshot(t)
		for _, k := range slices.Sorted(maps.Keys(before)) {
			if gone, added := setDiff(before[k], after[k]); len(gone)+len(added) > 0 {
				t.Errorf("after make demo (run %d), %s: gone %q, new %q", run, k, gone, added)
			}
		}
	}
}

// hostSnapshot lists, by kind, what a run of the demo could leave on the
// host: every nft table, link, mount point and kurma cgroup, the entries of
// the dirs it writes in (the top of /var/lib and /run, its own, /tmp's
// demo's logs: other kurma files there are other tests'), and IP
// forwarding.
func hostSnapshot(t *testing.T) map[string][]string {
	t.Helper()
	lines := func(name string, args ...string) []string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	var links []string
	for _, l := range lines("ip", "-o", "link", "show") {
		if f := strings.Fields(l); len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			links = append(links, name)
		}
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, l := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			mounts = append(mounts, f[4])
		}
	}
	entries := func(globs ...string) []string {
		var out []string
		for _, g := range globs {
			m, _ := filepath.Glob(g)
			out = append(out, m...)
		}
		return out
	}
	var files []string
	for _, d := range []string{"/var/lib/kurma-demo", "/run/kurma-demo"} {
		_ = filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			files = append(files, p)
			return nil
		})
	}
	forward, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	return map[string][]string{
		"nft tables":    lines("nft", "list", "tables"),
		"links":         links,
		"mounts":        mounts,
		"cgroups":       entries("/sys/fs/cgroup/*/kurma*", "/sys/fs/cgroup/kurma*"),
		"dirs":          entries("/var/lib/*", "/run/*", "/tmp/kurmad-demo*", "/etc/cni/net.d/*"),
		"demo files":    files,
		"ip forwarding": {strings.TrimSpace(string(forward))},
	}
}

// setDiff is what of a is not in b, and what of b is not in a.
func setDiff(a, b []string) (gone, added []string) {
	for _, x := range a {
		if !slices.Contains(b, x) {
			gone = append(gone, x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	return gone, added
}
