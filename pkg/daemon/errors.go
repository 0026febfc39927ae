package daemon

import (
	"errors"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/podnet"
)

// The daemon's own failures, marked on the error that says what failed
// (see marked).
var (
	// errPullFailed: an image pull asked through the API failed, whatever
	// the cause (source unreachable, image refused).
	errPullFailed = errors.New("image pull failed")
	// errImageInUse: a network's generation runs from the image, so it
	// cannot be removed.
	errImageInUse = errors.New("image in use")
	// errBadImageRef: an image reference asked through the API that no
	// scheme reads (a path without file://, a malformed name).
	errBadImageRef = errors.New("bad image reference")
)

// errorCodes maps the parts' sentinel errors, and the daemon's own, to API
// error codes, first match first: this is the one table of error codes on
// the daemon side.
var errorCodes = []struct {
	err  error
	code string
}{
	{errBadImageRef, api.CodeBadRequest},
	{errPullFailed, api.CodePullFailed},
	{errImageInUse, api.CodeConflict},
	{netplugin.ErrUnknownNetwork, api.CodeUnknownNetwork},
	{netplugin.ErrUnknownGeneration, api.CodeUnknownNetwork},
	{podnet.ErrBadRequest, api.CodeBadRequest},
	{podnet.ErrNotFound, api.CodeNotFound},
	{podnet.ErrPodNotReady, api.CodeConflict},
	{imagefetch.ErrNotFound, api.CodeNotFound},
	{netconfig.ErrInterfaceConflict, api.CodeConflict},
	{podnet.ErrNameInUse, api.CodeNameInUse},
	{podnet.ErrTryAgainLater, api.CodeNetworkUnavailable},
	{podnet.ErrConflict, api.CodeConflict},
	{netplugin.ErrUnavailable, api.CodeNetworkUnavailable},
	{netplugin.ErrTimeout, api.CodePluginTimeout},
	{netplugin.ErrPluginFailed, api.CodePluginFailed},
}

// marked is err, with its message, marked as mark for errorCodes.
type marked struct{ err, mark error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.mark} }

// apiError turns an error of the parts into the *api.Error the API sends:
// the code of the first sentinel it wraps (else internal), the status that
// goes with the code, its message, and itself as the cause. An *api.Error
// is returned as it is; nil stays nil.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return err
	}
	code := api.CodeInternal
	var ce *ConfigError
	if errors.As(err, &ce) {
		code = api.CodeInvalidConfig
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			code = c.code
			break
		}
	}
	return &api.Error{Status: api.StatusFor(code), Code: code, Message: err.Error(), Err: err, CNI: cniError(err)}
}

// cniError is the CNI error object of the plugin whose failure err is, if
// it printed one.
func cniError(err error) *api.CNIError {
	var ee *netplugin.ExecError
	if !errors.As(err, &ee) || ee.CNIError == nil {
		return nil
	}
	return &api.CNIError{Code: ee.CNIError.Code, Msg: ee.CNIError.Msg, Details: ee.CNIError.Details}
}
