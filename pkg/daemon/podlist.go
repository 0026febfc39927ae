package daemon

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
)

// podAnswers keeps each pod's answer, as GET /v1/pods lists it, encoded:
// a pod's JSON is made again only when its record (a new journal
// revision) or its last check changed, so a list of 1000 pods costs
// copying their bytes rather than encoding them (api.PodsEncoder).
type podAnswers struct {
	mu   sync.Mutex
	byID map[string]podAnswer
}

type podAnswer struct {
	rev   uint64
	check *podnet.PodCheck
	json  []byte
}

// encode returns pods (oldest first) with their checks as the JSON array
// the API answers, ending in a newline; it forgets the pods not among them.
func (c *podAnswers) encode(pods []*state.Pod, check func(id string) *podnet.PodCheck) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[string]podAnswer, len(pods))
	size := 2
	for _, p := range pods {
		chk := check(p.ID)
		a, ok := c.byID[p.ID]
		if !ok || a.rev != p.Revision() || a.check != chk {
			b, err := json.Marshal(wirePod(p, chk))
			if err != nil {
				return nil, err
			}
			a = podAnswer{rev: p.Revision(), check: chk, json: b}
		}
		next[p.ID] = a
		size += len(a.json) + 1
	}
	c.byID = next
	out := make([]byte, 0, size+1)
	out = append(out, '[')
	for i, p := range pods {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, next[p.ID].json...)
	}
	return append(out, ']', '\n'), nil
}

// EncodedPods is ListPods' answer, encoded (api.PodsEncoder).
func (b backend) EncodedPods(ctx context.Context) ([]byte, error) {
	return b.d.podAnswers.encode(b.d.pods.ListAll(), b.d.pods.LastCheck)
}
