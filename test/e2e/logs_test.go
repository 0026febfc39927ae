package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// TestLogFieldTypes: in kurmad's JSON log every field has one JSON type
// wherever it is written (a "duration" is always a number of
// nanoseconds, never also a string), over a boot, pods created, checked
// and deleted, a failed create, a reload and a stop.
func TestLogFieldTypes(t *testing.T) {
	e := newEnv(t)
	e.LogJSON = true
	e.writeConfig([]netDef{bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "eth{{num}}", true), cnitestNet("bad", "fail")}, nil)
	e.start()
	p := e.createPod("--net", "a")
	e.mustCtl("pod", "check", p.ID)
	if _, _, err := e.ctl("pod", "create", "--net", "a", "--net", "bad"); err == nil {
		t.Error("a create on bad succeeded")
	}
	e.mustCtl("reload")
	e.mustCtl("pod", "rm", p.ID)
	e.stop()

	types := map[string]map[string][]string{} // field → JSON type → first messages
	lines := 0
	for _, l := range strings.Split(e.Log(), "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var entry map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &entry); err != nil {
			t.Errorf("a log line that is not JSON: %s", l)
			continue
		}
		lines++
		var msg string
		_ = json.Unmarshal(entry["msg"], &msg)
		for k, v := range entry {
			kind := jsonType(v)
			if kind == "null" {
				continue
			}
			if types[k] == nil {
				types[k] = map[string][]string{}
			}
			if len(types[k][kind]) < 2 {
				types[k][kind] = append(types[k][kind], msg)
			}
		}
	}
	if lines < 20 {
		t.Fatalf("only %d JSON log lines", lines)
	}
	for k, kinds := range types {
		if len(kinds) > 1 {
			var desc []string
			for kind, msgs := range kinds {
				desc = append(desc, fmt.Sprintf("%s (%q)", kind, msgs))
			}
			sort.Strings(desc)
			t.Errorf("log field %q has %d types: %s", k, len(kinds), strings.Join(desc, ", "))
		}
	}
	if _, ok := types["duration"]["number"]; !ok {
		t.Errorf("no numeric duration field in the log: %v", types["duration"])
	}
}

// jsonType is the JSON type of v.
func jsonType(v json.RawMessage) string {
	switch s := strings.TrimSpace(string(v)); {
	case s == "null":
		return "null"
	case s == "true" || s == "false":
		return "boolean"
	case strings.HasPrefix(s, `"`):
		return "string"
	case strings.HasPrefix(s, "["):
		return "array"
	case strings.HasPrefix(s, "{"):
		return "object"
	}
	return "number"
}
