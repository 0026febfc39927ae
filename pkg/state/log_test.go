package state

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// idle waits until no compaction or sync is under way.
func (s *Store) idle() {
	s.mu.Lock()
	for s.compacting || s.syncing {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

// copyJournal copies the journal at path (its snapshot and log files), as
// the kernel holds them now, into a new directory; edit, when set, may
// change each log file's bytes on the way. It returns the copy's path.
func copyJournal(t *testing.T, path string, edit func(name string, b []byte) []byte) string {
	t.Helper()
	dir := t.TempDir()
	files, _ := filepath.Glob(path + "-log.*")
	for _, f := range append(files, path) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil && f != path {
			b = edit(filepath.Base(f), b)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, filepath.Base(path))
}

// podsOf opens the journal at path and returns its pods, each as JSON.
func podsOf(t *testing.T, path string) map[string]string {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer s.Close()
	pods, _ := s.ListPods()
	out := map[string]string{}
	for _, p := range pods {
		out[p.ID] = mustMarshal(t, p)
	}
	return out
}

// journalOps writes n random changes to 20 pods into s, keeping want (pod
// → JSON) in step; after each it calls after.
func journalOps(t *testing.T, s *Store, rng *rand.Rand, n int, want map[string]string, after func()) {
	t.Helper()
	for range n {
		id := fmt.Sprintf("pod-%02d", rng.IntN(20))
		var err error
		switch _, ok := want[id]; {
		case !ok:
			p := benchPod(id)
			p.Created = time.Date(2026, 1, 1, 0, 0, rng.IntN(60), 0, time.UTC)
			if err = s.PutPod(p); err == nil {
				want[id] = mustMarshal(t, p)
			}
		case rng.IntN(4) == 0:
			if err = s.DeletePod(id); err == nil {
				delete(want, id)
			}
		default:
			err = s.UpdatePod(id, func(p *Pod) error {
				p.Attachments[0].Result = fmt.Appendf(nil, `{"n":%d}`, rng.IntN(1000))
				p.Phase = []Phase{PhaseCreating, PhaseReady, PhaseDeleting, PhaseFailed}[rng.IntN(4)]
				want[id] = mustMarshal(t, p)
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		after()
	}
}

// TestKilledLosesNothing: what kurmad wrote survives its kill -9 without a
// Sync: the journal's files as the kernel holds them, opened, hold every
// write that returned.
func TestKilledLosesNothing(t *testing.T) {
	s, path := openTemp(t)
	s.setCompactAt(8 << 10) // several compactions on the way
	want := map[string]string{}
	rng := rand.New(rand.NewPCG(1, 2))
	step := 0
	journalOps(t, s, rng, 400, want, func() {
		if step++; step%50 == 0 {
			s.idle() // a copy taken mid-commit would be a torn bbolt file, which a kill does not make
			if got := podsOf(t, copyJournal(t, path, nil)); !maps.Equal(got, want) {
				t.Fatalf("after %d writes and a kill: %d pods, want %d:\n%v\nwant\n%v", step, len(got), len(want), got, want)
			}
		}
	})
	if err := s.PutGeneration(&Generation{Network: "a", Generation: 1, Definition: gendef.Definition{Limits: gendef.Limits{Pids: 64}, MainSeesPods: true}}); err != nil {
		t.Fatal(err)
	}
	s.idle()
	c, err := Open(copyJournal(t, path, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if gens, _ := c.Generations(); len(gens) != 1 || gens[0].Limits.Pids != 64 || !gens[0].MainSeesPods {
		t.Errorf("generation after a kill: %+v", gens)
	}
}

// TestPowerLoss: a power cut keeps what the last Sync covered and drops
// any part of what came after, and the journal opens to a state it went
// through. Each sync point's files are copied as the disk holds them
// then (after a Sync, with no write since, the kernel's copy is the
// disk's); a cut after it is that copy plus any prefix of the log bytes
// written since, and that prefix with a block never written (zeros) in it.
func TestPowerLoss(t *testing.T) {
	s, path := openTemp(t)
	s.setCompactAt(8 << 10)
	want := map[string]string{}
	rng := rand.New(rand.NewPCG(3, 4))
	type syncPoint struct {
		path string
		want map[string]string
	}
	var points []syncPoint
	step := 0
	journalOps(t, s, rng, 300, want, func() {
		if step++; step%7 == 0 {
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			s.idle()
			points = append(points, syncPoint{copyJournal(t, path, nil), maps.Clone(want)})
		}
	})
	for i, p := range points {
		if got := podsOf(t, p.path); !maps.Equal(got, p.want) {
			t.Fatalf("sync point %d reopened: %d pods, want %d", i, len(got), len(p.want))
		}
	}

	// Writes after the last sync, none of them synced, in one log file.
	s.setCompactAt(1 << 30)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.idle()
	base := copyJournal(t, path, nil)
	cur := filepath.Base(s.log.f.Name())
	ends := []int64{s.log.size}
	states := []map[string]string{maps.Clone(want)}
	journalOps(t, s, rng, 40, want, func() {
		ends = append(ends, s.log.size)
		states = append(states, maps.Clone(want))
	})
	full, err := os.ReadFile(s.log.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int64{ends[0], ends[0] + 1, ends[1] - 1, ends[1], ends[5] + 9, ends[20], ends[40] - 3, ends[40]} {
		// The state of the last write the cut holds whole.
		i := 0
		for i+1 < len(ends) && ends[i+1] <= cut {
			i++
		}
		for _, hole := range []bool{false, true} {
			img := copyJournal(t, base, func(name string, b []byte) []byte {
				if name != cur {
					return b
				}
				out := slices.Clone(full[:cut])
				if hole && cut < ends[40] {
					// The next block was never written; later ones were.
					out = append(out, make([]byte, min(512, ends[40]-cut))...)
					out = append(out, full[min(cut+512, ends[40]):]...)
				}
				return out
			})
			if got := podsOf(t, img); !maps.Equal(got, states[i]) {
				t.Errorf("cut at %d (hole %v): %d pods, want the %d of the state after write %d", cut, hole, len(got), len(states[i]), i)
			}
			// Opened once, the journal goes on from there: a later write
			// is not hidden behind the torn record.
			s2, err := Open(img)
			if err != nil {
				t.Fatal(err)
			}
			if err := s2.PutPod(&Pod{ID: "after", Phase: PhaseReady}); err != nil {
				t.Fatal(err)
			}
			s2.idle()
			if got := podsOf(t, copyJournal(t, img, nil)); got["after"] == "" {
				t.Errorf("cut at %d (hole %v): a write after the reopen is lost", cut, hole)
			}
			s2.Close()
		}
	}
}

// TestCompactedLogIgnored: a log file the snapshot already holds (its
// removal lost in a power cut) is not replayed over newer records.
func TestCompactedLogIgnored(t *testing.T) {
	s, path := openTemp(t)
	if err := s.PutPod(&Pod{ID: "p", Phase: PhaseReady}); err != nil {
		t.Fatal(err)
	}
	stale, err := os.ReadFile(s.log.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	staleName := s.log.f.Name()
	if err := s.DeletePod("p"); err != nil {
		t.Fatal(err)
	}
	s.setCompactAt(0) // the next write compacts
	if err := s.PutPod(&Pod{ID: "q", Phase: PhaseReady}); err != nil {
		t.Fatal(err)
	}
	s.idle()
	if _, err := os.Stat(staleName); !os.IsNotExist(err) {
		t.Fatalf("compacted log %s still there: %v", staleName, err)
	}
	img := copyJournal(t, path, nil)
	if err := os.WriteFile(filepath.Join(filepath.Dir(img), filepath.Base(staleName)), stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := podsOf(t, img); got["p"] != "" || got["q"] == "" {
		t.Errorf("pods %v: want q alone (p was deleted after the stale log)", slices.Sorted(maps.Keys(got)))
	}
}

// TestLogRecordCorrupt: a record whose checksum fails ends the log there.
func TestLogRecordCorrupt(t *testing.T) {
	s, path := openTemp(t)
	for _, id := range []string{"a", "b", "c"} {
		if err := s.PutPod(&Pod{ID: id, Phase: PhaseReady}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(&Pod{ID: "a", Phase: PhaseReady})
	recLen := 8 + 1 + 1 + 1 + len(b)
	img := copyJournal(t, path, func(_ string, log []byte) []byte {
		log = slices.Clone(log)
		log[logHeader+recLen+12] ^= 0xff // inside b's record
		return log
	})
	if got := podsOf(t, img); len(got) != 1 || got["a"] == "" {
		t.Errorf("pods %v: want a alone", slices.Sorted(maps.Keys(got)))
	}
}

// setCompactAt makes s compact once its log reaches n bytes.
func (s *Store) setCompactAt(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactAt = n
}
