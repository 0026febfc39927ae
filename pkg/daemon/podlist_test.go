package daemon

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
)

// TestPodAnswers: GET /v1/pods' encoded answer is what encoding ListPods'
// pods gives, after a pod's record changed, its check changed, and a pod
// went, as well as at first.
func TestPodAnswers(t *testing.T) {
	s, err := state.Open(filepath.Join(t.TempDir(), "kurmad.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c"} {
		if err := s.PutPod(&state.Pod{ID: id, Name: "pod-" + id, Netns: "/run/kurma/netns/" + id, Created: t0.Add(time.Duration(i) * time.Second),
			Phase: state.PhaseReady, Attachments: []state.Attachment{{Network: "n", Interface: "eth0", Phase: state.AttachDone,
				Result: json.RawMessage(`{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"}]}`), RawResult: `{"cniVersion": "1.1.0"}`}}}); err != nil {
			t.Fatal(err)
		}
	}
	checks := map[string]*podnet.PodCheck{}
	var c podAnswers
	step := func(what string) {
		t.Helper()
		pods, _ := s.ListPods()
		got, err := c.encode(pods, func(id string) *podnet.PodCheck { return checks[id] })
		if err != nil {
			t.Fatal(err)
		}
		wire := make([]api.Pod, 0, len(pods))
		for _, p := range pods {
			wire = append(wire, *wirePod(p, checks[p.ID]))
		}
		want, _ := json.Marshal(api.Answer(wire))
		if string(got) != string(want)+"\n" {
			t.Errorf("%s: encoded\n%s\nwant\n%s", what, got, want)
		}
	}
	step("first")
	step("again, unchanged")
	if err := s.SetPhase("b", state.PhaseFailed, "del failed"); err != nil {
		t.Fatal(err)
	}
	step("b's record changed")
	checks["c"] = &podnet.PodCheck{Time: t0, Degraded: true}
	step("c checked")
	if err := s.DeletePod("a"); err != nil {
		t.Fatal(err)
	}
	step("a deleted")
	if _, ok := c.byID["a"]; ok {
		t.Error("a's answer kept after it went")
	}
}
