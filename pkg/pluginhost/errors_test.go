package pluginhost

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

func TestErrorTexts(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		is     error
		want   string
		wantIn []string
	}{
		{
			name: "timeout", is: ErrTimeout,
			err:  &netconfig.NetworkError{Network: "mynet", Op: "/opt/network/add", Err: &timeoutError{limit: time.Minute}},
			want: `network "mynet": /opt/network/add: timed out after 1m0s`,
		},
		{
			name: "unavailable", is: ErrUnavailable,
			err:  &netconfig.NetworkError{Network: "mynet", Err: &unavailableError{reason: "main process exit status 1"}},
			want: `network "mynet": unavailable: main process exit status 1`,
		},
		{
			name: "exec error with CNI error", is: ErrPluginFailed,
			err: &netconfig.NetworkError{Network: "mynet", Op: "/opt/network/add", Err: &ExecError{ExitCode: 1,
				CNIError: &types.Error{Code: 11, Msg: "no more addresses", Details: "10.0.0.0/30"}, Stderr: "boom\n"}},
			want: `network "mynet": /opt/network/add: exited with code 1: CNI error 11: no more addresses (10.0.0.0/30); stderr: boom`,
		},
		{
			name: "killed by signal", is: ErrPluginFailed,
			err:  &netconfig.NetworkError{Network: "n", Op: "/opt/network/del", Err: &ExecError{ExitCode: -1, Signal: "SIGSEGV"}},
			want: `network "n": /opt/network/del: killed by signal SIGSEGV`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrapped := fmt.Errorf("pod x: %w", tt.err)
			if !errors.Is(wrapped, tt.is) {
				t.Errorf("errors.Is(%v) false", tt.is)
			}
			var ne *netconfig.NetworkError
			if !errors.As(wrapped, &ne) || ne.Network == "" {
				t.Errorf("errors.As(*netconfig.NetworkError) = %v, %+v", errors.As(wrapped, &ne), ne)
			}
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

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

// An ExecError leads errors.As to the plugin's CNI error object, through
// the NetworkError Exec wraps it in, and is still ErrPluginFailed.
func TestExecErrorUnwrapsCNIError(t *testing.T) {
	err := netconfig.WrapNetworkError("n", "/opt/network/check", &ExecError{ExitCode: 1, CNIError: &types.Error{Code: 7, Msg: "bad"}})
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != 7 || !errors.Is(err, ErrPluginFailed) {
		t.Errorf("errors.As(%v) = %v", err, ce)
	}
	if errors.As(netconfig.WrapNetworkError("n", "x", &ExecError{ExitCode: 2}), &ce) {
		t.Error("an ExecError without a CNI error object gave one")
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
			t.Errorf("testutil.CgroupParent(%q) = %q, pluginhost uses %q", dir, got, want)
		}
	}
}
