package idem

import (
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Error is a protocol error: something the client sent, or the state of the
// key, prevents execution. Its Kind (an idemtype.ErrorKind) decides the HTTP
// status. It is idemtype.Error, named here too because the engine returns it.
type Error = idemtype.Error

func errorf(kind idemtype.ErrorKind, format string, args ...any) *Error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// ErrNotImplemented is what generated phase stubs return. The execution is
// released (no record remains) and the client gets 501.
var ErrNotImplemented = &Error{Kind: idemtype.KindNotImplemented, Detail: "this phase is the generated stub; implement it"}

// ErrFenced means another owner took the key over: this execution's writes
// were rolled back and nothing it did after the takeover was committed.
var ErrFenced = errors.New("idem: fenced: another execution owns this key")

// ReleaseError marks a failure that happened before any effect: the claim is
// deleted and the same key may be used again. Create it with Release.
type ReleaseError struct{ Err error }

func (e *ReleaseError) Error() string { return "released: " + e.Err.Error() }
func (e *ReleaseError) Unwrap() error { return e.Err }

// Release wraps err to say that the phase failed without any effect (bad
// input, authorization, rate limiting), so the key is freed. It is honoured
// only while no local phase of the execution has committed; afterwards the
// failure is treated as ambiguous, since effects exist.
func Release(err error) error {
	if err == nil {
		return nil
	}
	return &ReleaseError{Err: err}
}
