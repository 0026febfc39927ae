package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is an API error: what a Backend returns to choose the response's
// status and code, and what the Client returns for every error response.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"error"`
	// CNI is the CNI error object a plugin answered with, when the
	// failure is a plugin's that printed one: kurma-cni hands its code on
	// to the runtime.
	CNI *CNIError `json:"cni,omitempty"`
	// Err is the cause, kept for errors.Is/As on the daemon side; it is not
	// sent over the wire.
	Err error `json:"-"`
}

// Errorf returns an *Error with code, the status that goes with it (see
// StatusFor) and a formatted message. A %w verb in format sets Err.
func Errorf(code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	e := &Error{Status: StatusFor(code), Code: code, Message: wrapped.Error()}
	if u := errors.Unwrap(wrapped); u != nil {
		e.Err = u
	}
	return e
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// IsCode reports whether err is (or wraps) an *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// CNIError is a plugin's CNI error object, as the CNI spec has it.
type CNIError struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
}

// Error codes sent in the "code" field of every error response, with the
// HTTP status each one goes with:
//
//	bad_request         400  malformed, oversized or invalid request
//	unknown_network     400  a requested network is not in the config
//	invalid_config      400  a reload found problems in the config file (nothing changed)
//	forbidden           403  the peer is not root
//	not_found           404  no such pod, image or route
//	method_not_allowed  405  the route exists with other methods
//	conflict            409  e.g. removing an image a network uses, checking a pod that is not ready
//	name_in_use         409  another pod has the name asked for
//	internal            500  anything unexpected (including handler panics)
//	plugin_failed       502  a network plugin returned an error
//	pull_failed         502  an image pull failed (source unreachable, image refused)
//	network_unavailable 503  the network's plugin is not running
//	plugin_timeout      504  a network plugin did not answer in time
const (
	CodeBadRequest         = "bad_request"
	CodeUnknownNetwork     = "unknown_network"
	CodeForbidden          = "forbidden"
	CodeNotFound           = "not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeConflict           = "conflict"
	CodeInvalidConfig      = "invalid_config"
	CodeNameInUse          = "name_in_use"
	CodeInternal           = "internal"
	CodePluginFailed       = "plugin_failed"
	CodePullFailed         = "pull_failed"
	CodeNetworkUnavailable = "network_unavailable"
	CodePluginTimeout      = "plugin_timeout"
)

var codeStatus = map[string]int{
	CodeBadRequest:         http.StatusBadRequest,
	CodeUnknownNetwork:     http.StatusBadRequest,
	CodeForbidden:          http.StatusForbidden,
	CodeNotFound:           http.StatusNotFound,
	CodeMethodNotAllowed:   http.StatusMethodNotAllowed,
	CodeConflict:           http.StatusConflict,
	CodeInvalidConfig:      http.StatusBadRequest,
	CodeNameInUse:          http.StatusConflict,
	CodeInternal:           http.StatusInternalServerError,
	CodePluginFailed:       http.StatusBadGateway,
	CodePullFailed:         http.StatusBadGateway,
	CodeNetworkUnavailable: http.StatusServiceUnavailable,
	CodePluginTimeout:      http.StatusGatewayTimeout,
}

// StatusFor returns the HTTP status that goes with an error code, 500 for
// codes it does not know.
func StatusFor(code string) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}
