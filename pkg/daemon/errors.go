package daemon

import (
	"errors"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/pluginhost"
	"github.com/kurma-project/kurma/pkg/podnet"
)

// errorCodes maps the parts' sentinel errors to API error codes, first
// match first.
var errorCodes = []struct {
	err  error
	code string
}{
	{podnet.ErrUnknownNetwork, api.CodeUnknownNetwork},
	{pluginhost.ErrUnknownNetwork, api.CodeUnknownNetwork},
	{podnet.ErrBadRequest, api.CodeBadRequest},
	{podnet.ErrNotFound, api.CodeNotFound},
	{podnet.ErrPodNotReady, api.CodeConflict},
	{imagefetch.ErrNotFound, api.CodeNotFound},
	{netconfig.ErrInterfaceConflict, api.CodeConflict},
	{podnet.ErrNameInUse, api.CodeNameInUse},
	{podnet.ErrTryAgainLater, api.CodeNetworkUnavailable},
	{podnet.ErrConflict, api.CodeConflict},
	{pluginhost.ErrUnavailable, api.CodeNetworkUnavailable},
	{pluginhost.ErrTimeout, api.CodePluginTimeout},
	{pluginhost.ErrPluginFailed, api.CodePluginFailed},
}

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
	var ee *pluginhost.ExecError
	if !errors.As(err, &ee) || ee.CNIError == nil {
		return nil
	}
	return &api.CNIError{Code: ee.CNIError.Code, Msg: ee.CNIError.Msg, Details: ee.CNIError.Details}
}
