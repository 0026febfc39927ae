package api

import (
	"errors"
	"fmt"
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
