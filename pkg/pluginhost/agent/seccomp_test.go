package agent

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netconfig"
)

// allow_syscalls accepts exactly the names the filter denies: a name
// netconfig accepts that the filter does not know would stop the network
// at start, and a denied call netconfig does not accept could never be
// consented to.
func TestDeniedSyscallsMatchConfig(t *testing.T) {
	if got, want := DeniedSyscalls(), netconfig.DeniedSyscalls(); !slices.Equal(got, want) {
		t.Errorf("filter denies %v\nallow_syscalls takes %v", got, want)
	}
}

// Each consent lifts exactly its call, and a held capability its gated
// calls; an unknown name is refused.
func TestPolicy(t *testing.T) {
	p, err := newPolicy(FilterOptions{Allow: []string{"keyctl", "unshare"}}, 1<<unix.CAP_SYS_MODULE)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deniedSyscalls {
		allowed := d.name == "keyctl" || d.cap == unix.CAP_SYS_MODULE
		if slices.Contains(p.deny, d.nr) == allowed {
			t.Errorf("%s: denied = %v", d.name, !allowed)
		}
	}
	if len(p.newUserNS) != 1 || p.newUserNS[0] != newUserNSCalls[0].nr {
		t.Errorf("user namespace rule on %v; want clone only", p.newUserNS)
	}
	if _, err := newPolicy(FilterOptions{Allow: []string{"read"}}, 0); err == nil {
		t.Error("allow_syscalls read accepted")
	}
}
