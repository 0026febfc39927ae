package networkpod

import (
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

func TestParseCNIError(t *testing.T) {
	tests := []struct {
		out  string
		code uint
		ok   bool
	}{
		{`{"cniVersion":"1.0.0","code":7,"msg":"bad","details":"d"}`, 7, true},
		{`{"code":0,"msg":""}`, 0, true},
		{`{"cniVersion":"1.0.0","ips":[]}`, 0, false},
		{`not json`, 0, false},
		{``, 0, false},
	}
	for _, tt := range tests {
		e := parseCNIError([]byte(tt.out))
		if (e != nil) != tt.ok || (e != nil && e.Code != tt.code) {
			t.Errorf("parseCNIError(%q) = %+v", tt.out, e)
		}
	}
}

func TestTail(t *testing.T) {
	if got := tail("abcdef", 3); got != "…def" {
		t.Errorf("got %q", got)
	}
	if got := tail("ab", 3); got != "ab" {
		t.Errorf("got %q", got)
	}
}

// The leak checks of the e2e, soak and bench suites find a daemon's
// cgroups through testutil.CgroupParent: it must name the same directory.
func TestCgroupParentMatchesTestutil(t *testing.T) {
	for _, dir := range []string{"/tmp/kte-123/run", "/run/kurma-demo"} {
		if got, want := testutil.CgroupParent(dir), defaultCgroupParent(dir); got != want {
			t.Errorf("testutil.CgroupParent(%q) = %q, networkpod uses %q", dir, got, want)
		}
	}
}
