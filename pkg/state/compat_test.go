package state

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// Records as the previous release's kurmad wrote them (before kurma's
// vocabulary renamed the Go fields: Runtime.IfName, Attachment.RawTruncated),
// byte for byte.
const (
	previousPodID  = "0b7c5d0e-9d3a-4c51-8f3e-2a1d6c9e4b10"
	previousPodRec = `{"id":"0b7c5d0e-9d3a-4c51-8f3e-2a1d6c9e4b10","name":"default/web",` +
		`"netns":"/run/kurma/netns/0b7c5d0e-9d3a-4c51-8f3e-2a1d6c9e4b10","networks":["mynet:IP=10.1.0.9"],` +
		`"created":"2026-01-02T03:04:05Z","phase":"ready","attachments":[{"network":"mynet","interface":"net1",` +
		`"config":"eyJuYW1lIjoibXluZXQifQ==","image":"sha512-abc","phase":"done","result":{"cniVersion":"1.1.0"},` +
		`"raw_result":"{\"cniVersion\": \"1.1.0\"","raw_result_truncated":true,"generation":2}],` +
		`"runtime":{"owner":"podman","container_id":"c0ffee","ifname":"net1","network":"kcni","netns":"/run/netns/c0ffee",` +
		`"netns_dev":4,"netns_ino":4026532001}}`
	previousGenerationRec = `{"network":"mynet","generation":2,"definition":"d1","image":"sha512-abc","config":"e30=",` +
		`"allow_capabilities":["CAP_BPF"]}`
)

// TestPreviousRecords: a journal written by the previous kurmad is read by
// this one (its pods adopted, their attachments torn down with what they
// journaled, their generations run again), and what this one writes back
// keeps every key the previous one reads, so a downgrade reads it too.
func TestPreviousRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kurmad.db")
	// The previous release's journal: bbolt alone, these buckets, no log.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		pods, err := tx.CreateBucket(podsBucket)
		if err != nil {
			return err
		}
		gens, err := tx.CreateBucket(generationsBucket)
		if err != nil {
			return err
		}
		if err := pods.Put([]byte(previousPodID), []byte(previousPodRec)); err != nil {
			return err
		}
		return gens.Put([]byte(generationKey("mynet", 2)), []byte(previousGenerationRec))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatalf("the previous release's journal does not open: %v", err)
	}
	t.Cleanup(func() { s.Close() })

	p, err := s.GetPod(previousPodID)
	if err != nil {
		t.Fatal(err)
	}
	want := &Pod{
		ID: previousPodID, Name: "default/web", Netns: "/run/kurma/netns/" + previousPodID,
		Networks: []string{"mynet:IP=10.1.0.9"}, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Phase: PhaseReady,
		Attachments: []Attachment{{Network: "mynet", Interface: "net1", Config: []byte(`{"name":"mynet"}`), Image: "sha512-abc",
			Phase: AttachDone, Result: json.RawMessage(`{"cniVersion":"1.1.0"}`), RawResult: `{"cniVersion": "1.1.0"`,
			RawResultTruncated: true, Generation: 2}},
		Runtime: &Runtime{Owner: "podman", ContainerID: "c0ffee", Interface: "net1", Network: "kcni", Netns: "/run/netns/c0ffee",
			NetnsDev: 4, NetnsIno: 4026532001},
	}
	if got, _ := json.Marshal(p); string(got) != mustMarshal(t, want) {
		t.Errorf("previous pod record read as\n%s\nwant\n%s", got, mustMarshal(t, want))
	}
	if p.Runtime == nil || p.Runtime.Interface != "net1" || !p.Attachments[0].RawResultTruncated {
		t.Errorf("runtime %+v, attachment %+v: a renamed field lost its value", p.Runtime, p.Attachments[0])
	}

	attached, err := s.AttachedGenerations()
	if err != nil || len(attached) != 1 || attached[0].Network != "mynet" || attached[0].Generation != 2 || gendef.IDOf(attached[0].Image) != "sha512-abc" {
		t.Errorf("AttachedGenerations = %+v, %v", attached, err)
	}
	gens, err := s.Generations()
	if err != nil || len(gens) != 1 || gens[0].Network != "mynet" || gens[0].Generation != 2 || gens[0].Hash != "d1" ||
		string(gens[0].Config) != "{}" || !slices.Equal(gens[0].AllowCapabilities, []string{"CAP_BPF"}) {
		t.Errorf("Generations = %+v, %v", gens, err)
	}

	// Written back (as any update does), the record has the same keys at
	// every level.
	if err := s.SetPhase(previousPodID, PhaseDeleting, ""); err != nil {
		t.Fatal(err)
	}
	// Closed, the journal is bbolt alone again, as the previous kurmad
	// reads it.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if logs, _ := logFiles(path); len(logs) != 0 {
		t.Errorf("log files %v left after Close: the previous kurmad would not read them", logs)
	}
	db, err = bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rewritten []byte
	if err := db.View(func(tx *bolt.Tx) error {
		rewritten = slices.Clone(tx.Bucket(podsBucket).Get([]byte(previousPodID)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]string{{}, {"attachments", "0"}, {"runtime"}} {
		if got, want := keysAt(t, rewritten, path), keysAt(t, []byte(previousPodRec), path); !slices.Equal(got, want) {
			t.Errorf("rewritten record's keys at %v: %v, the previous kurmad's: %v", path, got, want)
		}
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// keysAt returns the sorted keys of the object at path in the JSON doc
// (path elements are keys, or list indexes as decimal strings).
func keysAt(t *testing.T, doc []byte, path []string) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i := int(p[0] - '0')
			v = x[i]
		}
	}
	m, _ := v.(map[string]any)
	return slices.Sorted(maps.Keys(m))
}

// A generation record with every key set, as kurmad wrote it before
// gendef (state.Generation and state.Limits of their own), byte for byte.
const fullGenerationRec = `{"network":"full","generation":7,"definition":"d409babc441c3ee6352cfeb44d8c8fb30b2936be644c56658fe0372d1452927b",` +
	`"image":"sha256-0123abcd","config":"eyJuYW1lIjoiZnVsbCIsImNuaVZlcnNpb24iOiIxLjAuMCIsInR5cGUiOiJicmlkZ2UiLCJpcGFtIjp7InN1Ym5ldCI6ICIxMC4xLjAuMC8xNiIsICJ0eXBlIjogImhvc3QtbG9jYWwifX0=",` +
	`"allow_capabilities":["CAP_SYS_MODULE","CAP_BPF"],"allow_syscalls":["keyctl","bpf"],` +
	`"limits":{"pids":2048,"memory":536870912,"call_pids":-1,"call_memory":67108864,"tmpfs":16777216,"writable_layer":33554432,"state_dir":134217728},` +
	`"main_sees_pods":true,"kubernetes_credentials":true}`

// TestFullGenerationRecord: a journal holding a generation record with
// every key, as kurmad wrote it before gendef, reads back as the same
// definition and hash, and the record written back is the same bytes.
func TestFullGenerationRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kurmad.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		gens, err := tx.CreateBucket(generationsBucket)
		if err != nil {
			return err
		}
		return gens.Put([]byte(generationKey("full", 7)), []byte(fullGenerationRec))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	gens, err := s.Generations()
	if err != nil || len(gens) != 1 {
		t.Fatalf("Generations = %v, %v", gens, err)
	}
	want := &Generation{Network: "full", Generation: 7, Hash: "d409babc441c3ee6352cfeb44d8c8fb30b2936be644c56658fe0372d1452927b",
		Definition: gendef.Definition{
			Image:             gendef.Ref("sha256-0123abcd"),
			Config:            []byte(`{"name":"full","cniVersion":"1.0.0","type":"bridge","ipam":{"subnet": "10.1.0.0/16", "type": "host-local"}}`),
			AllowCapabilities: []string{"CAP_SYS_MODULE", "CAP_BPF"}, AllowSyscalls: []string{"keyctl", "bpf"},
			Limits: gendef.Limits{Pids: 2048, Memory: 512 << 20, CallPids: -1, CallMemory: 64 << 20, Tmpfs: 16 << 20,
				WritableLayer: 32 << 20, StateDir: 128 << 20},
			MainSeesPods: true, KubernetesCredentials: true,
		}}
	if !reflect.DeepEqual(gens[0], want) {
		t.Errorf("the record reads as %+v, want %+v", gens[0], want)
	}
	if err := s.PutGeneration(gens[0]); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(gens[0]); string(b) != fullGenerationRec {
		t.Errorf("written back as\n%s\nwant\n%s", b, fullGenerationRec)
	}
}
