package idem

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Kind names one protocol error. Each kind has a fixed HTTP status and a
// stable problem type URI (ProblemTypeBase + kind).
type Kind string

// The protocol errors. Their string values are part of the public contract:
// they appear in problem type URIs and never change.
const (
	KindMissingKey     Kind = "missing-key"         // 400: the operation requires a key and none was sent
	KindInvalidKey     Kind = "invalid-key"         // 400: empty, too long, bad characters, bad format, or repeated header
	KindInvalidRequest Kind = "invalid-request"     // 400: the body cannot be fingerprinted (malformed JSON, too deep, duplicate names)
	KindMissingScope   Kind = "missing-scope"       // 401: no principal (or scope header) to scope the key to
	KindInvalidScope   Kind = "invalid-scope"       // 400: the principal or scope header is not valid UTF-8 or is too long
	KindMismatch       Kind = "key-reused"          // 422: same key, different request
	KindInFlight       Kind = "in-flight"           // 409: another execution holds the key
	KindNotImplemented Kind = "not-implemented"     // 501: a phase is still the generated stub
	KindFailed         Kind = "failed"              // 500: an execution failed after it may have had effects
	KindUnavailable    Kind = "unavailable"         // 503: the idempotency store could not be reached; nothing was claimed
	KindNotStored      Kind = "response-not-stored" // 410: the request completed, but its body was too large to store for replay
	// KindInvalidSignature (401): a signed sender's signature is missing,
	// malformed, outside its time tolerance or wrong (see runtime/idemsig).
	KindInvalidSignature Kind = "invalid-signature"
)

// ProblemTypeBase prefixes every problem type URI.
const ProblemTypeBase = "urn:idemgen:problem:"

var kindStatus = map[Kind]int{
	KindMissingKey:     http.StatusBadRequest,
	KindInvalidKey:     http.StatusBadRequest,
	KindInvalidRequest: http.StatusBadRequest,
	KindMissingScope:   http.StatusUnauthorized,
	KindInvalidScope:   http.StatusBadRequest,
	KindMismatch:       http.StatusUnprocessableEntity,
	KindInFlight:       http.StatusConflict,
	KindNotImplemented: http.StatusNotImplemented,
	KindFailed:         http.StatusInternalServerError,
	KindUnavailable:    http.StatusServiceUnavailable,
	KindNotStored:      http.StatusGone,

	KindInvalidSignature: http.StatusUnauthorized,
}

var kindTitle = map[Kind]string{
	KindMissingKey:     "Idempotency-Key header is required",
	KindInvalidKey:     "Idempotency-Key header is malformed",
	KindInvalidRequest: "Request cannot be fingerprinted",
	KindMissingScope:   "No principal to scope the Idempotency-Key to",
	KindInvalidScope:   "The principal or scope header cannot scope an Idempotency-Key",
	KindMismatch:       "Idempotency-Key was used with a different request",
	KindInFlight:       "A request with this Idempotency-Key is in progress",
	KindNotImplemented: "Operation phase not implemented",
	KindFailed:         "Request failed; retry with the same Idempotency-Key to resume",
	KindUnavailable:    "The idempotency store is unavailable; retry with the same Idempotency-Key",
	KindNotStored:      "The request completed, but its response was too large to store for replay",

	KindInvalidSignature: "The request's signature is missing or invalid",
}

// Error is a protocol error: something the client sent, or the state of the
// key, prevents execution. Its Kind decides the HTTP status.
type Error struct {
	Kind       Kind
	Detail     string
	RetryAfter time.Duration // for KindInFlight and KindFailed: when a retry may succeed
	Err        error         // the cause, if any; never shown to clients
}

func (e *Error) Error() string {
	msg := string(e.Kind)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Status returns the HTTP status of the error's kind.
func (e *Error) Status() int {
	if s, ok := kindStatus[e.Kind]; ok {
		return s
	}
	return http.StatusInternalServerError
}

func errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// ErrNotImplemented is what generated phase stubs return. The execution is
// released (no record remains) and the client gets 501.
var ErrNotImplemented = &Error{Kind: KindNotImplemented, Detail: "this phase is the generated stub; implement it"}

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

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// ProblemFor returns the problem document for a protocol error.
func ProblemFor(e *Error) Problem {
	return Problem{Type: ProblemTypeBase + string(e.Kind), Title: kindTitle[e.Kind], Status: e.Status(), Detail: e.Detail}
}

// ProblemResponse renders a protocol error as a complete response:
// status, Content-Type application/problem+json, Retry-After where it applies,
// a Link to the published policy when policyURL is set, and the JSON body.
func ProblemResponse(e *Error, policyURL string) *Response {
	body, _ := json.Marshal(ProblemFor(e))
	h := http.Header{}
	h.Set("Content-Type", "application/problem+json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	if policyURL != "" {
		h.Set("Link", "<"+policyURL+`>; rel="describedby"`)
	}
	return &Response{Status: e.Status(), Header: h, Body: body}
}
