package kurmacni

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/api"
)

// codeOf maps kurmad's API error codes to CNI error codes; anything else
// is CNI's "internal" (999) with kurmad's message: conflict (409) on ADD,
// the attachment already held (CNI has no code for a second ADD without a
// DEL) or its interface name taken in the runtime's netns; plugin_failed
// without a CNI error object. name_in_use cannot happen: a runtime's pod
// is outside kurmad's unique-name rule. CHECK reads a conflict apart (see
// Check). docs/runtimes.md ("Errors") has this table.
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
// a call kurmad did not answer in time, or a kurmad that cannot be reached,
// is what reachError says; a plugin's own CNI error keeps its code, with
// kurmad's message naming the network; the rest as codeOf says. limit is
// the call's deadline.
func cniError(err error, conf *NetConf, limit time.Duration) *types.Error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, api.ErrUnreachable) {
		return reachError(err, conf.socket(), limit)
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

// reachError is the CNI error of a call kurmad did not answer: "try again
// later" (11) for what passes (kurmad hung past the deadline, not running,
// gone during the call), a permanent error naming the fix for what waiting
// cannot mend (the socket refuses the caller, or its path cannot be a
// socket).
//
// Its messages never read "not found" or "no such file or directory":
// containerd's go-cni takes a DEL error containing either for "already
// deleted" and drops it, and a DEL that kurmad never got must reach the
// runtime as the failure it is (kurmad also releases a pod whose runtime
// dropped it: see docs/runtimes.md).
func reachError(err error, sock string, limit time.Duration) *types.Error {
	var msg string
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("kurmad at %s did not answer within %s (kurma-cni's deadline, which \"timeout\" sets): it is hung or overloaded; try again later", sock, limit)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return types.NewError(types.ErrInternal, fmt.Sprintf("kurma-cni: permission denied on kurmad's API socket %s: the API is root-only; run the runtime, which runs kurma-cni, as root", sock), "")
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENAMETOOLONG):
		return notASocket(sock)
	case errors.Is(err, syscall.ECONNREFUSED):
		if fi, serr := os.Stat(sock); serr == nil && fi.Mode().Type() != fs.ModeSocket {
			return notASocket(sock)
		}
		msg = fmt.Sprintf("nothing listens on kurmad's API socket %s (left by a kurmad that stopped): start kurmad, then try again", sock)
	case errors.Is(err, syscall.ENOENT):
		msg = fmt.Sprintf("kurmad's API socket %s does not exist: kurmad is not running (start it, then try again), or \"socket\" names the wrong path", sock)
	default:
		msg = err.Error()
	}
	return types.NewError(types.ErrTryAgainLater, "kurma-cni: "+msg, "")
}

// notASocket is the permanent error of a "socket" path where no socket
// can be.
func notASocket(sock string) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("kurma-cni: %s is not a unix socket, so kurmad cannot answer there: set \"socket\" to kurmad's API socket (kurmad --socket; default %s)", sock, api.DefaultSocket), "")
}
