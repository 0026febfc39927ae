package kurmacni

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/api"
)

// codeOf maps kurmad's API error codes to CNI error codes; anything else
// is CNI's "internal" (999) with kurmad's message: conflict (409) on ADD,
// the attachment already held (CNI has no code for a second ADD without a
// DEL) or its interface name taken in the runtime's netns; plugin_failed
// without a CNI error object. name_in_use cannot happen: a runtime's pod
// is outside kurmad's unique-name rule. CHECK reads a conflict apart (see
// Check). The README's kurma-cni section has this table.
var codeOf = map[string]uint{
	// A network that is not running, or a plugin that did not answer in
	// time, may well work later.
	api.CodeNetworkUnavailable: types.ErrTryAgainLater,
	api.CodePluginTimeout:      types.ErrTryAgainLater,
	// The config names what kurmad does not have, or asks what it
	// refuses.
	api.CodeUnknownNetwork: types.ErrInvalidNetworkConfig,
	api.CodeBadRequest:     types.ErrInvalidNetworkConfig,
	api.CodeNotFound:       types.ErrUnknownContainer,
}

// cniError turns a failed API call into the CNI error the runtime gets:
// kurmad unreachable (not running, restarting, or gone during the call)
// is "try again later" naming the socket; a plugin's own CNI error keeps
// its code, with kurmad's message naming the network; the rest as codeOf
// says.
func cniError(err error, conf *NetConf) *types.Error {
	if errors.Is(err, api.ErrUnreachable) {
		return types.NewError(types.ErrTryAgainLater, "kurma-cni: "+err.Error(), "")
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		return types.NewError(types.ErrInternal, "kurma-cni: "+err.Error(), "")
	}
	if ae.CNI != nil && ae.CNI.Code != 0 {
		return types.NewError(ae.CNI.Code, "kurma-cni: "+ae.Message, ae.CNI.Details)
	}
	code, ok := codeOf[ae.Code]
	if !ok {
		code = types.ErrInternal
	}
	return types.NewError(code, "kurma-cni: "+ae.Message, "kurmad at "+conf.socket()+": "+ae.Code)
}
