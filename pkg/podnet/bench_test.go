package podnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/state"
)

// BenchmarkCreateDelete times podnet's own share of a one-network pod's
// create+delete (real netns, real journal on disk, a plugin that answers
// at once), alone and from 16 goroutines; it reports the process's CPU per
// create+delete and the median create.
func BenchmarkCreateDelete(b *testing.B) {
	testutil.RequireRoot(b)
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", par), func(b *testing.B) { benchCreateDelete(b, par) })
	}
}

func benchCreateDelete(b *testing.B, par int) {
	dir := b.TempDir()
	store, err := state.Open(filepath.Join(dir, "kurmad.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	cfg, err := netconfig.Parse([]byte(fakeConfig), dir)
	if err != nil {
		b.Fatal(err)
	}
	hostDNS := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(hostDNS, []byte("nameserver 192.0.2.53\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	m, err := New(Options{Networks: newFakeNetworks(b, cfg, store), Exec: newFakeExec(), Store: store, NetnsDir: filepath.Join(dir, "netns"),
		PodsDir:        filepath.Join(dir, "pods"),
		HostResolvConf: hostDNS, TeardownTimeout: 10 * time.Second, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var mu sync.Mutex
	var creates []time.Duration
	cpu0 := processCPU(b)
	testutil.RunParallel(b, par, func() error {
		start := time.Now()
		p, err := m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
		if err != nil {
			return err
		}
		d := time.Since(start)
		mu.Lock()
		creates = append(creates, d)
		mu.Unlock()
		return m.Delete(ctx, p.ID)
	})
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
	slices.Sort(creates)
	b.ReportMetric(float64(creates[len(creates)/2])/1e3, "create-p50-µs")
}

// processCPU is the CPU time (user+system) this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
