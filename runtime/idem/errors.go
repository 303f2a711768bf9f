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

// PhaseError is what Run returns when a claimed execution failed in a
// phase (or in the commit after it): which operation and phase, the
// recovery point the execution had reached, and whether it had resumed an
// earlier execution (a takeover). Err is what the request is answered
// with: the phase's own error when the key was released, or an *Error
// (failed, unavailable when the commit's outcome is unknown, in flight when
// the execution was fenced); errors.As and errors.Is see through it. The
// engine logs each PhaseError once, at its Logger.
type PhaseError struct {
	Operation     string
	Phase         string // the phase that failed, or whose commit did
	RecoveryPoint string // the last phase committed; "" for none
	Resumed       bool
	Err           error
}

func (e *PhaseError) Error() string {
	return e.Operation + ": phase " + e.Phase + ": " + e.Err.Error()
}
func (e *PhaseError) Unwrap() error { return e.Err }

// releaseError marks a failure that happened before any effect: the claim
// is deleted and the same key may be used again (Release).
type releaseError struct{ Err error }

func (e *releaseError) Error() string { return "released: " + e.Err.Error() }
func (e *releaseError) Unwrap() error { return e.Err }

// answerError ends an execution from a phase before the last with a
// response of the operation's own (Answer).
type answerError struct{ Response *Response }

func (e *answerError) Error() string {
	return fmt.Sprintf("idem: the phase answered %d", e.Response.Status)
}

// Answer is what a phase before the last returns to end the execution with
// resp instead of going on: resp is stored and replayed to every retry, as
// the final phase's response would be, and a local phase's writes commit
// with it. The generated XAnswer takes the operation's typed response.
// Answer(nil) is an error of its own, as a final phase's nil response is.
func Answer(resp *Response) error {
	if resp == nil {
		return errors.New("idem: Answer needs a response")
	}
	return &answerError{Response: resp}
}

// Answered is the response of an Answer in err's chain, or nil: a phase
// that returned it ended its execution with that response.
func Answered(err error) *Response {
	var a *answerError
	if errors.As(err, &a) {
		return a.Response
	}
	return nil
}

// Release wraps err to say that the phase failed without any effect (bad
// input, authorization, rate limiting), so the key is freed. It is honoured
// only while no local phase of the execution has committed; afterwards the
// failure is treated as ambiguous, since effects exist.
func Release(err error) error {
	if err == nil {
		return nil
	}
	return &releaseError{Err: err}
}

// Released is the cause of a Release in err's chain, or nil: a phase that
// returned it declared its failure free of effects. An adapter answers a
// request with the cause, as it would without idemgen.
func Released(err error) error {
	var rel *releaseError
	if errors.As(err, &rel) {
		return rel.Err
	}
	return nil
}
