package daemon

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/networks"
)

// TestGenerationStatesOnTheWire: every state the controller reports is a
// state the API documents, the same word, so that wireGeneration passes
// it as it is.
func TestGenerationStatesOnTheWire(t *testing.T) {
	for _, s := range [][2]string{
		{networks.StateFetching, api.StateFetching},
		{networks.StateStarting, api.StateStarting},
		{networks.StateRunning, api.StateRunning},
		{networks.StateUnavailable, api.StateUnavailable},
		{networks.StateFailed, api.StateFailed},
		{networks.StateStopped, api.StateStopped},
		{networks.StateRetiring, api.StateRetiring},
	} {
		if s[0] != s[1] {
			t.Errorf("the controller's state %q is %q on the wire", s[0], s[1])
		}
	}
}

// TestWireGenerationKeepsEveryField: each field of the controller's
// status reaches the wire (a field added to one and not the other fails
// here).
func TestWireGenerationKeepsEveryField(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := networks.Status{Network: "n", Generation: 2, State: networks.StateFetching, Image: "sha512-x", Restarts: 3,
		Pid: 4, Reason: "r", Default: true, NetworkPolicy: true, PolicyNetworks: []string{"p"}, Pods: 5,
		Role: "policy", Since: now, NextRetry: now.Add(time.Second), FetchedBytes: 6, FetchTotalBytes: 7,
		FetchStarted: now.Add(-time.Second), Trespass: "t"}
	w := wireGeneration(s)
	if n, m := reflect.TypeFor[networks.Status]().NumField(), reflect.TypeFor[api.Generation]().NumField(); n != m {
		t.Fatalf("networks.Status has %d fields, api.Generation %d", n, m)
	}
	sv, wv := reflect.ValueOf(s), reflect.ValueOf(w)
	for i := range sv.NumField() {
		name := sv.Type().Field(i).Name
		if got := wv.FieldByName(name); !got.IsValid() || !reflect.DeepEqual(got.Interface(), sv.Field(i).Interface()) {
			t.Errorf("%s: %v on the wire, want %v", name, got, sv.Field(i))
		}
	}
}

// TestWireChangesAsBefore: a reload's answer has every list, [] when
// empty, and its changes only when there are some.
func TestWireChangesAsBefore(t *testing.T) {
	for _, tt := range []struct {
		c    networks.Changes
		want string
	}{
		{networks.Changes{}, `{"config":"/c.json","added":[],"replaced":[],"retired":[],"updated":[],"unchanged":[]}`},
		{networks.Changes{Added: []string{"a"}, Updated: []string{"u"}, Keys: map[string][]string{"u": {"default"}}},
			`{"config":"/c.json","added":["a"],"replaced":[],"retired":[],"updated":["u"],"unchanged":[],"changes":{"u":["default"]}}`},
	} {
		b, err := json.Marshal(wireChanges(&tt.c, "/c.json", false))
		if err != nil || string(b) != tt.want {
			t.Errorf("wireChanges(%+v) = %s, %v; want %s", tt.c, b, err, tt.want)
		}
	}
	b, _ := json.Marshal(wireChanges(&networks.Changes{}, "/c.json", true))
	if want := `{"config":"/c.json","added":[],"replaced":[],"retired":[],"updated":[],"unchanged":[],"dry_run":true}`; string(b) != want {
		t.Errorf("dry run: %s, want %s", b, want)
	}
}
