package netplugin

import (
	"errors"
	"testing"
)

// TestCallStdinHonoursHold: a held call's stdin is read only once its
// hold passed, and never when it failed; HeldStdin hands both to an
// Execer that holds the call itself.
func TestCallStdinHonoursHold(t *testing.T) {
	target := Target{Network: "n", Generation: 2}
	stdin := []byte(`{"name":"n"}`)

	plain := NewCall(target, AddPath, []string{"ns", "pod", "eth0"}, stdin)
	if got, err := plain.Stdin(); err != nil || string(got) != string(stdin) {
		t.Fatalf("a call without a hold: stdin %q, %v; want its stdin at once", got, err)
	}
	if _, hold := plain.HeldStdin(); hold != nil {
		t.Error("a call without a hold hands out a hold")
	}

	passed := false
	held := plain.HeldUntil(func() error { passed = true; return nil })
	if got, err := held.Stdin(); err != nil || string(got) != string(stdin) || !passed {
		t.Fatalf("a held call whose hold passes: stdin %q, %v, hold asked %v; want its stdin after the hold", got, err, passed)
	}
	if _, hold := plain.HeldStdin(); hold != nil {
		t.Error("HeldUntil changed the call it was asked of, not only its copy")
	}

	errSync := errors.New("journal: sync failed")
	refused := plain.HeldUntil(func() error { return errSync })
	if got, err := refused.Stdin(); !errors.Is(err, errSync) || got != nil {
		t.Fatalf("a held call whose hold fails: stdin %q, %v; want no stdin and the hold's error", got, err)
	}
	if got, hold := refused.HeldStdin(); string(got) != string(stdin) || !errors.Is(hold(), errSync) {
		t.Fatalf("HeldStdin: %q and a hold answering %v; want the stdin and the hold as given", got, hold())
	}
	if refused.Target != target || refused.Path != AddPath || len(refused.Args) != 3 {
		t.Errorf("the call's fields changed: %+v", refused)
	}
}
