package podnet

import (
	"errors"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/kurma-project/kurma/pkg/state"
)

// TestHeldAddrsFollowTheJournal: the cache of held addresses refuses an
// address a done attachment of the same network holds, not one of
// another network, and forgets a pod once the journal does (its address
// is free again, and its entry is dropped).
func TestHeldAddrsFollowTheJournal(t *testing.T) {
	store, err := state.Open(filepath.Join(t.TempDir(), "kurmad.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	put := func(id, network, addr string) {
		t.Helper()
		res := []byte(`{"cniVersion":"1.0.0","ips":[{"address":"` + addr + `"}]}`)
		if err := store.PutPod(&state.Pod{ID: id, Phase: state.PhaseReady, Attachments: []state.Attachment{
			{Network: network, Interface: "eth0", Phase: state.AttachDone, Result: res}}}); err != nil {
			t.Fatal(err)
		}
	}
	put("p1", "alpha", "10.1.0.5/24")
	put("p2", "beta", "10.1.0.6/24")
	var h heldAddrs
	want := map[netip.Addr]int{netip.MustParseAddr("10.1.0.5"): 0}
	for range 2 { // the second scan answers from the cache
		if err := h.clash(store, "new", 0, "alpha", want); !errors.Is(err, ErrForeignResult) {
			t.Fatalf("address held by p1 on alpha: %v; want ErrForeignResult", err)
		}
	}
	if err := h.clash(store, "new", 0, "beta", want); err != nil {
		t.Fatalf("the same address on another network: %v; want none", err)
	}
	if err := h.clash(store, "p1", 0, "alpha", want); err != nil {
		t.Fatalf("p1's own attachment: %v; want none", err)
	}
	if err := store.DeletePod("p1"); err != nil {
		t.Fatal(err)
	}
	if err := h.clash(store, "new", 0, "alpha", want); err != nil {
		t.Fatalf("after p1 left: %v; want none", err)
	}
	if n := len(h.nets["alpha"].results); n != 0 {
		t.Fatalf("%d results cached for alpha after its only pod left; want 0", n)
	}
}
