package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/podnet"
)

// TestAPIError: every sentinel of the parts, wrapped as the part wraps it,
// gets the status and code docs/api.md's error table gives it, the message a
// user reads is the error's own, and the cause stays reachable.
func TestAPIError(t *testing.T) {
	netErr := func(sentinel error) error {
		return &netplugin.NetworkError{Network: "mynet", Op: netplugin.AddPath, Err: sentinel}
	}
	tests := []struct {
		sentinel error
		err      error
		status   int
		code     string
	}{
		{netplugin.ErrUnknownNetwork, fmt.Errorf("%w %q (known networks: a)", netplugin.ErrUnknownNetwork, "nope"), http.StatusBadRequest, "unknown_network"},
		{netplugin.ErrUnknownGeneration, netErr(netplugin.ErrUnknownGeneration), http.StatusBadRequest, "unknown_network"},
		{podnet.ErrBadRequest, fmt.Errorf("%w: network %q is requested twice", podnet.ErrBadRequest, "a"), http.StatusBadRequest, "bad_request"},
		{podnet.ErrNotFound, fmt.Errorf("pod %q: %w", "p", podnet.ErrNotFound), http.StatusNotFound, "not_found"},
		{imagefetch.ErrNotFound, fmt.Errorf("image %q: %w", "sha512-x", imagefetch.ErrNotFound), http.StatusNotFound, "not_found"},
		{podnet.ErrPodNotReady, fmt.Errorf("pod %s is %s: %w", "p", "failed", podnet.ErrPodNotReady), http.StatusConflict, "conflict"},
		{netconfig.ErrInterfaceConflict, fmt.Errorf("create pod: %w", &netplugin.NetworkError{Network: "mynet", Op: "interface name", Err: netconfig.ErrInterfaceConflict}), http.StatusConflict, "conflict"},
		{podnet.ErrNameInUse, fmt.Errorf("%w: %q is the name of pod %s", podnet.ErrNameInUse, "web", "p"), http.StatusConflict, "name_in_use"},
		{podnet.ErrTryAgainLater, fmt.Errorf("create pod: %w", &netplugin.NetworkError{Network: "mynet", Op: netplugin.AddPath,
			Err: fmt.Errorf("%w (3 attempts in 1s): %w", podnet.ErrTryAgainLater, &netplugin.ExecError{ExitCode: 1})}), http.StatusServiceUnavailable, "network_unavailable"},
		{podnet.ErrConflict, fmt.Errorf("container c interface eth0: pod p: %w; delete it first", podnet.ErrConflict), http.StatusConflict, "conflict"},
		{netplugin.ErrUnavailable, fmt.Errorf("create pod: %w", netErr(netplugin.ErrUnavailable)), http.StatusServiceUnavailable, "network_unavailable"},
		{netplugin.ErrTimeout, fmt.Errorf("create pod: %w", netErr(netplugin.ErrTimeout)), http.StatusGatewayTimeout, "plugin_timeout"},
		{netplugin.ErrPluginFailed, fmt.Errorf("create pod: %w", netErr(netplugin.ErrPluginFailed)), http.StatusBadGateway, "plugin_failed"},
		// A pull's failure is pull_failed whatever its cause says.
		{errPullFailed, &marked{fmt.Errorf("image %q: %w", "sha512-x", imagefetch.ErrNotFound), errPullFailed}, http.StatusBadGateway, "pull_failed"},
		{errImageInUse, &marked{errors.New("image sha512-x is used by network(s) [a]"), errImageInUse}, http.StatusConflict, "conflict"},
		// A pull of a reference no scheme reads is the request's fault.
		{errBadImageRef, &marked{errors.New(`image "/x.aci" has no scheme; did you mean "file:///x.aci"?`), errBadImageRef}, http.StatusBadRequest, "bad_request"},
		{nil, errors.New("disk on fire"), http.StatusInternalServerError, "internal"},
	}
	covered := map[error]bool{}
	for _, tt := range tests {
		t.Run(tt.code+"/"+tt.err.Error(), func(t *testing.T) {
			covered[tt.sentinel] = true
			got := apiError(tt.err)
			var ae *api.Error
			if !errors.As(got, &ae) {
				t.Fatalf("apiError(%v) = %T, want *api.Error", tt.err, got)
			}
			if ae.Status != tt.status || ae.Code != tt.code || ae.Message != tt.err.Error() {
				t.Errorf("apiError(%v) = %d %s %q, want %d %s %q", tt.err, ae.Status, ae.Code, ae.Message, tt.status, tt.code, tt.err.Error())
			}
			if !errors.Is(got, tt.err) || (tt.sentinel != nil && !errors.Is(got, tt.sentinel)) {
				t.Errorf("apiError(%v) lost its cause", tt.err)
			}
		})
	}
	for _, c := range errorCodes {
		if !covered[c.err] {
			t.Errorf("errorCodes maps %v (%s) but no row above checks it", c.err, c.code)
		}
	}
}

// TestAPIErrorInvalidConfig: a reload's config problems are 400
// invalid_config, every problem in the message.
func TestAPIErrorInvalidConfig(t *testing.T) {
	err := &ConfigError{Path: "/etc/kurma/kurmad.json", Err: &netconfig.ValidationError{Problems: []netconfig.Problem{
		{Path: "pod_networks[0].name", Msg: "must not be empty"}, {Path: "state_dir", Msg: "cannot change"}}}, Reload: true}
	var ae *api.Error
	if !errors.As(apiError(err), &ae) || ae.Status != http.StatusBadRequest || ae.Code != api.CodeInvalidConfig {
		t.Fatalf("apiError = %#v, want 400 invalid_config", ae)
	}
	want := "config /etc/kurma/kurmad.json has 2 problem(s); nothing changed:\n  pod_networks[0].name: must not be empty\n  state_dir: cannot change"
	if ae.Message != want {
		t.Errorf("message %q, want %q", ae.Message, want)
	}
}

// TestAPIErrorCarriesCNI: a plugin's CNI error object reaches the API
// error, so kurma-cni can hand its code to the runtime; failures that are
// not a plugin's carry none.
func TestAPIErrorCarriesCNI(t *testing.T) {
	exec := &netplugin.ExecError{ExitCode: 1, CNIError: &types.Error{Code: 11, Msg: "busy", Details: "retry"}}
	var ae *api.Error
	if !errors.As(apiError(fmt.Errorf("create pod: %w", &netplugin.NetworkError{Network: "mynet", Op: netplugin.AddPath, Err: exec})), &ae) ||
		ae.CNI == nil || *ae.CNI != (api.CNIError{Code: 11, Msg: "busy", Details: "retry"}) || ae.Code != api.CodePluginFailed {
		t.Errorf("plugin's CNI error: %#v", ae)
	}
	if errors.As(apiError(&netplugin.ExecError{ExitCode: 1}), &ae) && ae.CNI != nil {
		t.Errorf("a plugin that printed no CNI error: %#v", ae.CNI)
	}
}

func TestAPIErrorPassesAPIErrorsAndNil(t *testing.T) {
	if err := apiError(nil); err != nil {
		t.Errorf("apiError(nil) = %v", err)
	}
	// An *api.Error, even one wrapping a sentinel of the table, is sent as
	// its maker chose.
	conflict := &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Message: "busy", Err: podnet.ErrNotFound}
	wrapped := fmt.Errorf("remove: %w", conflict)
	for _, err := range []error{conflict, wrapped} {
		if got := apiError(err); got != err {
			t.Errorf("apiError(%v) = %#v, want it unchanged", err, got)
		}
	}
}
