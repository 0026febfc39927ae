package kurmacni

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/api"
)

// TestCheck: CHECK finds the runtime's pod and has kurmad check it (GET
// /v1/pods/{id}/check): it passes when every network passed; a failed one
// is the plugin's message (999); a pod kurmad cannot check now (409) is
// code 11, as is kurmad down; an attachment kurmad does not hold is code 3.
func TestCheck(t *testing.T) {
	sock, b := serve(t)
	var notReady atomic.Bool
	b.Hook = func(method, _ string) error {
		if method == "CheckPod" && notReady.Load() {
			return api.Errorf(api.CodeConflict, "pod is deleting: not ready")
		}
		return nil
	}
	var added bytes.Buffer
	p := newPlugin(&added)
	c := conf("1.0.0", sock, "mynet", nil)
	if err := p.Add(cmdArgs(c, "chk", "eth0")); err != nil {
		t.Fatal(err)
	}
	// The runtime's CHECK carries the ADD's result (libcni's cache).
	c = conf("1.0.0", sock, "mynet", map[string]any{"prevResult": json.RawMessage(added.Bytes())})
	check := func(ctr string) error { return p.Check(cmdArgs(c, ctr, "eth0")) }
	if err := check("chk"); err != nil {
		t.Errorf("CHECK of a pod that passed: %v", err)
	}
	pods, err := b.ListPods(t.Context())
	if err != nil || len(pods) != 1 {
		t.Fatalf("pods %+v, %v", pods, err)
	}
	b.BreakCheck(pods[0].ID, "mynet", "CNI error 7: veth not found")
	checkCNIError(t, check("chk"), types.ErrInternal, `network "mynet" (eth0): CNI error 7: veth not found`)
	notReady.Store(true)
	checkCNIError(t, check("chk"), types.ErrTryAgainLater, "pod is deleting: not ready")
	checkCNIError(t, check("gone"), types.ErrUnknownContainer, "holds no attachment of container gone")
	var e *types.Error
	down := conf("1.0.0", filepath.Join(filepath.Dir(sock), "none.sock"), "mynet", map[string]any{"prevResult": json.RawMessage(added.Bytes())})
	if err := p.Check(cmdArgs(down, "chk", "eth0")); !errors.As(err, &e) || e.Code != types.ErrTryAgainLater {
		t.Errorf("CHECK with kurmad down: %v, want code 11", err)
	}
	// Without the ADD's result there is nothing to check against: a
	// CHECK without one fails rather than passes, before kurmad is asked.
	notReady.Store(false)
	checkCNIError(t, p.Check(cmdArgs(conf("1.0.0", sock, "mynet", nil), "chk", "eth0")), types.ErrInvalidNetworkConfig, `CHECK needs "prevResult"`)
}

// TestCheckOutcome: a network that gave no verdict is code 11 naming it;
// skipped networks pass.
func TestCheckOutcome(t *testing.T) {
	pod := &api.Pod{ID: "p", Check: &api.PodCheck{Attachments: []api.AttachmentCheck{
		{Network: "mynet", Interface: "eth0", Outcome: api.CheckPassed},
		{Network: "other", Interface: "eth1", Outcome: api.CheckSkipped},
	}}}
	if e := checkOutcome(pod); e != nil {
		t.Errorf("passed and skipped: %v", e)
	}
	pod.Check.Attachments[1] = api.AttachmentCheck{Network: "other", Interface: "eth1", Outcome: api.CheckUnknown, Message: "network unavailable"}
	checkCNIError(t, checkOutcome(pod), types.ErrTryAgainLater, `network "other" (eth1): network unavailable`)
}
