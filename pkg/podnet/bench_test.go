package podnet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/state"
)

// BenchmarkCreateDelete times podnet's own share of a one-network pod's
// create+delete (real netns, real journal on disk, a plugin that answers
// at once), alone and from 16 goroutines.
func BenchmarkCreateDelete(b *testing.B) {
	testutil.RequireRoot(b)
	for _, par := range []int{1, 16} {
		b.Run(map[int]string{1: "clients=1", 16: "clients=16"}[par], func(b *testing.B) {
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
			m, err := New(Options{Config: cfg, Exec: newFakeExec(), Store: store, NetnsDir: filepath.Join(dir, "netns"),
				PodsDir: filepath.Join(dir, "pods"), Serving: servingOf(cfg),
				HostResolvConf: hostDNS, TeardownTimeout: 10 * time.Second, Logger: log})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			testutil.RunParallel(b, par, func() error {
				p, err := m.Create(ctx, CreateRequest{Networks: []string{"alpha"}})
				if err != nil {
					return err
				}
				return m.Delete(ctx, p.ID)
			})
		})
	}
}
