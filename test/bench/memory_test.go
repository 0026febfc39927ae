package main

import (
	"os"
	"testing"
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
