package main

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The bench's memory row reads /proc: its own process has a PSS, a
// process that does not exist has none.
func TestProcReaders(t *testing.T) {
	kb, err := pssKB(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if kb <= 0 {
		t.Errorf("PSS of the test process = %d kB, want > 0", kb)
	}
	if _, err := pssKB(-1); err == nil {
		t.Error("pssKB(-1): no error")
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
}

// The bench's CPU rows read /proc/<pid>/stat's clock ticks: a process
// that spins uses CPU that processCPU sees (in 10 ms ticks).
func TestStatCPU(t *testing.T) {
	deadline := time.Now().Add(5 * time.Second)
	var own time.Duration
	for x := 1; own == 0 && time.Now().Before(deadline); x++ {
		for i := range 1 << 20 {
			x ^= i * x
		}
		var err error
		if own, err = processCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if own <= 0 {
		t.Errorf("processCPU stayed %v after spinning 5 s", own)
	}
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	if want := tv(ru.Utime) + tv(ru.Stime); own > want+50*time.Millisecond || own < want-100*time.Millisecond {
		t.Errorf("processCPU = %v, getrusage says %v: the wrong fields of /proc/<pid>/stat?", own, want)
	}
	if _, err := reapedCPU(os.Getpid()); err != nil {
		t.Error(err)
	}
	if _, err := processCPU(-1); err == nil {
		t.Error("processCPU(-1): no error")
	}
}
