package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	keys := []string{"password", "token"}
	tests := []struct{ name, in, want string }{
		{"top level, bytes kept", `{"name":"n", "password" : "s3cret",
  "ipam": {"type":"host-local"}}`, `{"name":"n", "password" : "[redacted]",
  "ipam": {"type":"host-local"}}`},
		{"any depth and type", `{"a":{"b":[{"token":{"x":[1,2]}},{"token":42}]},"password":null}`,
			`{"a":{"b":[{"token":"[redacted]"},{"token":"[redacted]"}]},"password":"[redacted]"}`},
		{"a value named like a key is a value", `{"k":"password","l":["token"]}`, `{"k":"password","l":["token"]}`},
		{"keys match exactly", `{"Password":"x","password2":"y"}`, `{"Password":"x","password2":"y"}`},
		{"escaped key", `{"pass\u0077ord":"x"}`, `{"pass\u0077ord":"[redacted]"}`},
		{"nothing to redact", `{"name":"n"}`, `{"name":"n"}`},
		{"not JSON, no key", `not json`, `not json`},
		{"not JSON with a key", `{"password":"x"`, `[redacted: not JSON, and it holds a redact_keys key]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(Redact([]byte(tt.in), keys)); got != tt.want {
				t.Errorf("Redact(%s)\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
	if got := string(Redact([]byte(`{"password":"x"}`), nil)); got != `{"password":"x"}` {
		t.Errorf("no keys: %s", got)
	}
}

// FuzzRedact: whatever the document, a redacted one is JSON when the input
// was, and holds no value of a redacted key.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{`{"password":"s3cret"}`, `{"a":[{"password":{"b":1}}, "password"]}`, `[1,{"password":2}]`, `"password"`, `{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Redact([]byte(in), []string{"password"})
		if !json.Valid([]byte(in)) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Redact(%q) = %q, not JSON", in, out)
		}
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					if k == "password" && e != "[redacted]" {
						t.Fatalf("Redact(%q) = %q keeps %v", in, out, e)
					}
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		walk(v)
	})
}

func TestStore(t *testing.T) {
	s := New(Options{PerPod: 2, MaxPods: 2, MaxOutput: 8, MaxStderr: 4, RedactKeys: []string{"k"}})
	s.Record("p1", Call{Path: "/opt/network/add", Args: []string{"a"}}, []byte(`{"k":1}`), []byte("0123456789"), []byte("ab€cd"))
	c := s.Calls("p1")
	if len(c) != 1 || c[0].Stdin != `{"k":"[r` || !c[0].StdinTruncated || c[0].Stdout != "01234567" || !c[0].StdoutTruncated ||
		c[0].Stderr != "cd" || !c[0].StderrTruncated || c[0].Args[0] != "a" {
		t.Errorf("p1's call %+v", c)
	}
	for i := range 3 {
		s.Record("p1", Call{Path: fmt.Sprint(i)}, nil, nil, nil)
	}
	if c := s.Calls("p1"); len(c) != 2 || c[0].Path != "1" || c[1].Path != "2" {
		t.Errorf("p1 keeps %+v, want the last 2 calls oldest first", c)
	}
	s.Record("p2", Call{}, nil, nil, nil)
	s.Record("p1", Call{Path: "3"}, nil, nil, nil) // p1 is now the most recent
	s.Record("p3", Call{}, nil, nil, nil)          // drops p2
	if len(s.Calls("p2")) != 0 || len(s.Calls("p1")) != 2 || len(s.Calls("p3")) != 1 {
		t.Errorf("after a third pod: p1 %d, p2 %d, p3 %d calls", len(s.Calls("p1")), len(s.Calls("p2")), len(s.Calls("p3")))
	}
	s.Forget("p1")
	if c := s.Calls("p1"); c == nil || len(c) != 0 {
		t.Errorf("forgotten pod: %v, want an empty list", c)
	}
	if strings.Contains(s.Calls("p3")[0].Stdin, "k") {
		t.Error("unexpected stdin")
	}
}

// A key added by a reload is redacted in the calls kept before it, and in
// those recorded after.
func TestSetRedactKeys(t *testing.T) {
	s := New(Options{RedactKeys: []string{"a"}})
	s.Record("p", Call{}, []byte(`{"a":1,"b":"secret"}`), nil, nil)
	s.SetRedactKeys([]string{"a", "b"})
	s.Record("p", Call{}, []byte(`{"b":2}`), nil, nil)
	c := s.Calls("p")
	if len(c) != 2 || c[0].Stdin != `{"a":"[redacted]","b":"[redacted]"}` || c[1].Stdin != `{"b":"[redacted]"}` {
		t.Errorf("calls %+v", c)
	}
}

// The transcripts of many pods with large outputs stay within MaxBytes:
// the pods written to least recently lose theirs first, each counted in
// Dropped, and a forgotten pod gives its bytes back.
func TestMaxBytes(t *testing.T) {
	const maxBytes = 1 << 20
	s := New(Options{MaxBytes: maxBytes})
	out := []byte(strings.Repeat("x", 64<<10)) // MaxOutput's default: kept whole
	const pods = 100
	for i := range pods {
		for range 4 {
			s.Record(fmt.Sprintf("p%03d", i), Call{Path: "/opt/network/add"}, out, out, out)
		}
		if b := s.Bytes(); b > maxBytes {
			t.Fatalf("after pod %d: %d bytes kept, over the %d-byte cap", i, b, maxBytes)
		}
	}
	kept, oldestKept := 0, pods
	for i := range pods {
		if len(s.Calls(fmt.Sprintf("p%03d", i))) > 0 {
			kept++
			oldestKept = min(oldestKept, i)
		}
	}
	if oldestKept != pods-kept {
		t.Errorf("kept %d pods from p%03d on: an older pod was kept while a newer one was dropped", kept, oldestKept)
	}
	if kept == 0 || len(s.Calls(fmt.Sprintf("p%03d", pods-1))) != 4 {
		t.Fatalf("kept %d pods; the newest must keep its 4 calls", kept)
	}
	if got := s.Dropped(); got != uint64(pods-kept) {
		t.Errorf("Dropped = %d, want %d", got, pods-kept)
	}
	before := s.Bytes()
	s.Forget(fmt.Sprintf("p%03d", pods-1))
	if after := s.Bytes(); after >= before || s.Dropped() != uint64(pods-kept) {
		t.Errorf("Forget: %d bytes → %d, dropped %d; want fewer bytes and no drop counted", before, after, s.Dropped())
	}
}
