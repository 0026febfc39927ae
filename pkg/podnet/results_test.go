package podnet

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kurma-project/kurma/pkg/cniresult"
)

func TestResultMemoParsesOnceAndEncodesAsBefore(t *testing.T) {
	stored := []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/x"}],"ips":[{"interface":0,"address":"10.1.0.5/24","gateway":"10.1.0.1"}],"dns":{}}`)
	m := &resultMemo{cur: map[string]keptResult{}}
	a, ok := m.parse(stored)
	if !ok {
		t.Fatal("a valid result was not parsed")
	}
	b, _ := m.parse(stored)
	if a.res != b.res {
		t.Error("the second read parsed the result again")
	}
	res, err := cniresult.Parse(stored, "")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(res)
	if string(a.json) != string(want) {
		t.Errorf("kept encoding %s, want what parse+marshal gives: %s", a.json, want)
	}
	if _, ok := m.parse([]byte(`{"code":7,"msg":"no"}`)); ok {
		t.Error("an error object was kept as a result")
	}
}

func TestResultMemoIsBounded(t *testing.T) {
	m := &resultMemo{cur: map[string]keptResult{}}
	first := []byte(`{"cniVersion":"1.1.0","ips":[{"address":"10.9.0.1/24"}]}`)
	m.parse(first)
	for i := 0; i < 2*memoGeneration+1; i++ {
		m.parse([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","ips":[{"address":"10.%d.%d.2/24"}]}`, i/250, i%250)))
	}
	if n := len(m.cur) + len(m.old); n > 2*memoGeneration {
		t.Errorf("%d entries kept, want at most %d", n, 2*memoGeneration)
	}
	if _, kept := m.cur[string(first)]; kept {
		t.Error("an entry unread for two generations is still kept")
	}
	if _, kept := m.old[string(first)]; kept {
		t.Error("an entry unread for two generations is still kept")
	}
}

// TestResultMemoKeepIsWhatParseGives: what attach keeps (its parsed result
// and the encoding it journals) encodes as what a read of the journal would
// parse and encode, for results of every version a plugin prints.
func TestResultMemoKeepIsWhatParseGives(t *testing.T) {
	for _, tt := range []struct{ stdout, version string }{
		{`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"aa:bb:cc:dd:ee:ff","sandbox":"/run/x"}],"ips":[{"interface":0,"address":"10.1.0.5/24","gateway":"10.1.0.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.1.0.1"],"search":["a.b"]}}`, "1.0.0"},
		{`{"cniVersion":"0.4.0","interfaces":[{"name":"eth0"}],"ips":[{"version":"4","interface":0,"address":"10.1.0.6/24"}],"dns":{}}`, "0.4.0"},
		{`{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.7/24","gateway":"10.1.0.1"},"dns":{}}`, "0.2.0"},
		{`{"cniVersion":"1.1.0","ips":[{"address":"fd00::7/64"}]}`, "1.1.0"},
	} {
		res, err := cniresult.Parse([]byte(tt.stdout), tt.version)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		parsed, ok := (&resultMemo{cur: map[string]keptResult{}}).parse(stored)
		if !ok {
			t.Fatalf("%s: the journaled result does not parse", stored)
		}
		m := &resultMemo{cur: map[string]keptResult{}}
		m.keep(stored, res)
		kept, _ := m.parse(stored)
		if kept.res != res {
			t.Errorf("%s: a read parsed again what attach kept", stored)
		}
		// The same encoding, of the same result (an address converted from
		// an old version may be a 16-byte net.IP in one and 4 in the other).
		again, _ := json.Marshal(kept.res)
		if string(kept.json) != string(parsed.json) || string(again) != string(parsed.json) {
			t.Errorf("kept %s (result encodes as %s); a read of the journal gives %s", kept.json, again, parsed.json)
		}
	}
}
