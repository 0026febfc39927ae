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
