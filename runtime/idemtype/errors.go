package idemtype

import (
	"cmp"
	"net/http"
	"slices"
	"time"
)

// ErrorKind names one protocol error. Each kind has a fixed HTTP status, a
// title, and a stable problem type URI (ProblemTypeBase + kind).
type ErrorKind string

// The protocol errors. Their string values appear in problem type URIs.
const (
	KindMissingKey     ErrorKind = "missing-key"            // 400: the operation requires a key and none was sent
	KindInvalidKey     ErrorKind = "invalid-key"            // 400: empty, too long, bad characters, bad format, or repeated header
	KindInvalidRequest ErrorKind = "invalid-request"        // 400: the body cannot be fingerprinted (malformed JSON, too deep, duplicate names)
	KindMissingScope   ErrorKind = "missing-scope"          // 401: no principal (or scope header) to scope the key to
	KindInvalidScope   ErrorKind = "invalid-scope"          // 400: the principal or scope header is not valid UTF-8 or is too long
	KindMismatch       ErrorKind = "key-reused"             // 422: same key, different request
	KindInFlight       ErrorKind = "in-flight"              // 409: another execution holds the key
	KindNotImplemented ErrorKind = "not-implemented"        // 501: a phase is still the generated stub
	KindFailed         ErrorKind = "failed"                 // 500: an execution failed after it may have had effects
	KindUnavailable    ErrorKind = "unavailable"            // 503: the store could not be reached (nothing was claimed), or a commit's outcome is unknown
	KindNotStored      ErrorKind = "response-not-stored"    // 410: the request completed, but its body was too large to store for replay
	KindTooLarge       ErrorKind = "request-too-large"      // 413: the request body exceeds the operation's limit; nothing was claimed
	KindMediaType      ErrorKind = "unsupported-media-type" // 415: the body's media type is not one the operation declares; nothing was claimed
	// KindInvalidSignature (401): a signed sender's signature is missing,
	// malformed, outside its time tolerance or wrong (see runtime/idemsig).
	KindInvalidSignature ErrorKind = "invalid-signature"
)

// ProblemTypeBase prefixes every problem type URI.
const ProblemTypeBase = "urn:idemgen:problem:"

// ProblemContentType is the media type of a problem document (RFC 9457).
const ProblemContentType = "application/problem+json"

// kindStatus is each kind's HTTP status (numbers, not net/http's names,
// to keep this package free of net/http).
var kindStatus = map[ErrorKind]int{
	KindMissingKey:     400,
	KindInvalidKey:     400,
	KindInvalidRequest: 400,
	KindMissingScope:   401,
	KindInvalidScope:   400,
	KindMismatch:       422,
	KindInFlight:       409,
	KindNotImplemented: 501,
	KindFailed:         500,
	KindUnavailable:    503,
	KindNotStored:      410,
	KindTooLarge:       413,
	KindMediaType:      415,

	KindInvalidSignature: 401,
}

var kindTitle = map[ErrorKind]string{
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
	KindTooLarge:       "The request body is larger than this operation accepts",
	KindMediaType:      "The request body's media type is not one this operation accepts",

	KindInvalidSignature: "The request's signature is missing or invalid",
}

func (k ErrorKind) String() string { return string(k) }

// ErrorKinds returns every kind this package defines, in status order.
func ErrorKinds() []ErrorKind {
	kinds := make([]ErrorKind, 0, len(kindStatus))
	for k := range kindStatus {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b ErrorKind) int {
		if c := cmp.Compare(kindStatus[a], kindStatus[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return kinds
}

// Status returns the kind's HTTP status; 500 for a kind this package does
// not define.
func (k ErrorKind) Status() int {
	if s, ok := kindStatus[k]; ok {
		return s
	}
	return 500
}

// Title returns the kind's problem title, a short sentence for people; ""
// for a kind this package does not define.
func (k ErrorKind) Title() string { return kindTitle[k] }

// ProblemType returns the kind's problem type URI.
func (k ErrorKind) ProblemType() string { return ProblemTypeBase + string(k) }

// Error is a protocol error: something the client sent, or the state of the
// key, prevents execution. Its Kind decides the HTTP status.
type Error struct {
	Kind       ErrorKind
	Detail     string
	RetryAfter time.Duration // when a retry may succeed (KindInFlight, KindUnavailable, KindFailed); sent as Retry-After
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
func (e *Error) Status() int { return e.Kind.Status() }

// Message is the error in words for the client: its Detail, or its kind's
// title when it has none. Never empty for a kind this package defines.
func (e *Error) Message() string {
	if e.Detail != "" {
		return e.Detail
	}
	return e.Kind.Title()
}

// ShouldRetry reports whether a retry of the same request with the same
// key may get past the error: whether it says when (RetryAfter). A request
// in flight, a store that did not answer, a failed execution that a retry
// resumes do; a bad key, a reused one, a stored failure do not.
func (e *Error) ShouldRetry() bool { return e.RetryAfter > 0 }

// Problem returns the error's problem document. Err is left out: it is
// never shown to clients.
func (e *Error) Problem() Problem {
	return Problem{Type: e.Kind.ProblemType(), Title: e.Kind.Title(), Status: e.Status(), Detail: e.Detail}
}

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Response is an HTTP response as the engine stores and replays it, and as
// the API contract (runtime/idemapi) renders a refusal.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}
