package netplugin

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
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
			err:  &NetworkError{Network: "mynet", Op: "/opt/network/add", Err: &TimeoutError{Limit: time.Minute}},
			want: `network "mynet": /opt/network/add: timed out after 1m0s`,
		},
		{
			name: "unavailable", is: ErrUnavailable,
			err:  &NetworkError{Network: "mynet", Err: &UnavailableError{Reason: "main process exit status 1"}},
			want: `network "mynet": unavailable: main process exit status 1`,
		},
		{
			name: "exec error with CNI error", is: ErrPluginFailed,
			err: &NetworkError{Network: "mynet", Op: "/opt/network/add", Err: &ExecError{ExitCode: 1,
				CNIError: &types.Error{Code: 11, Msg: "no more addresses", Details: "10.0.0.0/30"}, Stderr: "boom\n"}},
			want: `network "mynet": /opt/network/add: exited with code 1: CNI error 11: no more addresses (10.0.0.0/30); stderr: boom`,
		},
		{
			name: "killed by signal", is: ErrPluginFailed,
			err:  &NetworkError{Network: "n", Op: "/opt/network/del", Err: &ExecError{ExitCode: -1, Signal: "SIGSEGV"}},
			want: `network "n": /opt/network/del: killed by signal SIGSEGV`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrapped := fmt.Errorf("pod x: %w", tt.err)
			if !errors.Is(wrapped, tt.is) {
				t.Errorf("errors.Is(%v) false", tt.is)
			}
			var ne *NetworkError
			if !errors.As(wrapped, &ne) || ne.Network == "" {
				t.Errorf("errors.As(*NetworkError) = %v, %+v", errors.As(wrapped, &ne), ne)
			}
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// An ExecError leads errors.As to the plugin's CNI error object, through
// the NetworkError Exec wraps it in, and is still ErrPluginFailed.
func TestExecErrorUnwrapsCNIError(t *testing.T) {
	err := WrapNetworkError("n", "/opt/network/check", &ExecError{ExitCode: 1, CNIError: &types.Error{Code: 7, Msg: "bad"}})
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != 7 || !errors.Is(err, ErrPluginFailed) {
		t.Errorf("errors.As(%v) = %v", err, ce)
	}
	if errors.As(WrapNetworkError("n", "x", &ExecError{ExitCode: 2}), &ce) {
		t.Error("an ExecError without a CNI error object gave one")
	}
}

// WrapNetworkError names a network once: an error that already names the
// same network is kept as it is, another network's is wrapped.
func TestWrapNetworkError(t *testing.T) {
	inner := &NetworkError{Network: "a", Op: AddPath, Err: ErrTimeout}
	if got := WrapNetworkError("a", "create", inner); got != error(inner) {
		t.Errorf("WrapNetworkError of the same network = %v, want it unchanged", got)
	}
	var ne *NetworkError
	if got := WrapNetworkError("b", "create", inner); !errors.As(got, &ne) || ne.Network != "b" || !errors.Is(got, ErrTimeout) {
		t.Errorf("WrapNetworkError of another network = %v", got)
	}
	if WrapNetworkError("a", "x", nil) != nil {
		t.Error("WrapNetworkError(nil) is not nil")
	}
}

// VerbOf knows the contract's paths and nothing else; Path is its
// inverse; every path constant is a verb's.
func TestVerb(t *testing.T) {
	for _, v := range Verbs() {
		if got, ok := VerbOf(v.Path()); !ok || got != v {
			t.Errorf("VerbOf(%q) = %+v %v", v.Path(), got, ok)
		}
	}
	for _, p := range []string{"/opt/network/setup", "/opt/network", "/opt/other/add", "add", "/opt/network/add/x", ""} {
		if got, ok := VerbOf(p); ok {
			t.Errorf("VerbOf(%q) = %+v, want none", p, got)
		}
	}
	for _, p := range []string{AddPath, DelPath, CheckPath, GCPath, StatusPath} {
		if _, ok := VerbOf(p); !ok {
			t.Errorf("%s is no verb's path", p)
		}
	}
	if AddPath != Path("add") || StatusPath != "/opt/network/status" || len(VerbNames()) != len(Verbs()) {
		t.Errorf("paths: %s %s", AddPath, StatusPath)
	}
}

// TestVerbsIsACopy: what Verbs returns is the caller's; the one list
// VerbOf and VerbNames read stays as it was.
func TestVerbsIsACopy(t *testing.T) {
	vs := Verbs()
	vs[0].Name = "changed"
	if v, ok := VerbOf(Path("add")); !ok || v.Name != "add" || Verbs()[0].Name != "add" || VerbNames()[0] != "add" {
		t.Fatal("changing the returned slice changed the contract's verbs")
	}
}
