package podnet

import (
	"encoding/json"
	"sync"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/kurma-project/kurma/pkg/cniresult"
)

// keptResult is a journaled result parsed once, with its encoding.
type keptResult struct {
	res  *current.Result
	json json.RawMessage
}

// resultMemo keeps the results fromRecord parsed, keyed by their journaled
// bytes: GET /v1/pods and /v1/info read every pod, and re-parsing and
// re-encoding each stored result was most of their time. Keyed by content,
// an entry is right for any pod and any Manager; two generations bound it:
// when the current one is full it becomes the old one, and what was not
// read during a whole generation is dropped.
type resultMemo struct {
	mu       sync.Mutex
	cur, old map[string]keptResult
}

// memoGeneration bounds one generation (a few hundred bytes per entry).
const memoGeneration = 4096

var results = &resultMemo{cur: map[string]keptResult{}}

// parse returns the result journaled as stored (normalized, so it says its
// own version), parsing and encoding it only the first time.
func (m *resultMemo) parse(stored []byte) (keptResult, bool) {
	m.mu.Lock()
	k, ok := m.cur[string(stored)]
	if !ok {
		if k, ok = m.old[string(stored)]; ok {
			m.put(string(stored), k)
		}
	}
	m.mu.Unlock()
	if ok {
		return k, true
	}
	res, err := cniresult.Parse(stored, "")
	if err != nil {
		return keptResult{}, false
	}
	b, err := json.Marshal(res)
	if err != nil {
		return keptResult{}, false
	}
	k = keptResult{res: res, json: b}
	m.mu.Lock()
	m.put(string(stored), k)
	m.mu.Unlock()
	return k, true
}

// keep records res, which attach parsed from a plugin's output and
// journals encoded as stored: the pod Create returns, and every later read
// of it, then find it without parsing and encoding it again.
func (m *resultMemo) keep(stored []byte, res *current.Result) {
	m.mu.Lock()
	m.put(string(stored), keptResult{res: res, json: stored})
	m.mu.Unlock()
}

// put adds k under m.mu, starting a new generation when the current one
// is full.
func (m *resultMemo) put(key string, k keptResult) {
	if len(m.cur) >= memoGeneration {
		m.old, m.cur = m.cur, make(map[string]keptResult, memoGeneration)
	}
	m.cur[key] = k
}
