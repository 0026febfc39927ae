package podnet

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestRawResultKept: the add's stdout is journaled as the plugin wrote it
// beside the normalized result, and Get returns it; past MaxRawResult a
// prefix ending on a whole UTF-8 sequence is kept, marked truncated.
func TestRawResultKept(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	const exact = "\n{ \"ips\" : [ { \"address\" : \"10.203.9.9/16\" } ],\t\"cniVersion\":\"1.0.0\" }\n\n"
	fe.on("add alpha", func(call, context.Context) ([]byte, error) { return []byte(exact), nil })
	// A result past the cap whose cut falls inside "é" (2 bytes).
	pad := strings.Repeat("a", MaxRawResult-len(`{"cniVersion":"1.0.0","x":"`)-1)
	big := `{"cniVersion":"1.0.0","x":"` + pad + `é` + strings.Repeat("b", 100) + `"}`
	fe.on("add beta", func(call, context.Context) ([]byte, error) { return []byte(big), nil })

	p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.m.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	alpha, beta := got.Attachments[0], got.Attachments[1]
	if alpha.RawResult != exact || alpha.RawResultTruncated || resultOf(t, alpha).IPs[0].Address.String() != "10.203.9.9/16" {
		t.Errorf("alpha: raw %q (truncated %v), result %s; want the exact bytes and the normalized result", alpha.RawResult, alpha.RawResultTruncated, alpha.Result)
	}
	if !beta.RawResultTruncated || len(beta.RawResult) != MaxRawResult-1 || !utf8.ValidString(beta.RawResult) || !strings.HasPrefix(big, beta.RawResult) {
		t.Errorf("beta: %d raw bytes (truncated %v, valid UTF-8 %v); want the %d-byte prefix before the cut rune",
			len(beta.RawResult), beta.RawResultTruncated, utf8.ValidString(beta.RawResult), MaxRawResult-1)
	}
	if err := f.m.Delete(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
	f.assertGone(t, p.ID)
}

func TestRawResultFunc(t *testing.T) {
	for _, tt := range []struct {
		in        string
		wantLen   int
		truncated bool
	}{
		{"", 0, false},
		{strings.Repeat("x", MaxRawResult), MaxRawResult, false},
		{strings.Repeat("x", MaxRawResult+1), MaxRawResult, true},
		{strings.Repeat("x", MaxRawResult-2) + "€", MaxRawResult - 2, true}, // 3 bytes across the cap
	} {
		got, truncated := rawResult([]byte(tt.in))
		if len(got) != tt.wantLen || truncated != tt.truncated || !strings.HasPrefix(tt.in, got) {
			t.Errorf("rawResult(%d bytes) = %d bytes, %v; want %d, %v", len(tt.in), len(got), truncated, tt.wantLen, tt.truncated)
		}
	}
}
