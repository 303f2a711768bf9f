// Package idempreset holds vendors' API contracts, complete, one file each:
// what an API that speaks a vendor's conventions sets as
// idem.Options.Contract, so that the vendor's own clients read its answers
// as they read the vendor's. Stripe's is in stripe.go.
package idempreset

import (
	"maps"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// StripeError is Stripe's error object, as its clients parse it
// (stripe-go's *stripe.Error): {"error": {"type", "code", "message"}}.
type StripeError struct {
	Error StripeErrorBody `json:"error"`
}

// StripeErrorBody is the inside of a StripeError.
type StripeErrorBody struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

// The types and codes of Stripe's errors that refusals use.
const (
	StripeIdempotencyError      = "idempotency_error"
	StripeInvalidRequestError   = "invalid_request_error"
	StripeAPIError              = "api_error"
	StripeIdempotencyKeyInUse   = "idempotency_key_in_use"
	StripeLockTimeout           = "lock_timeout"
	StripeShouldRetryHeader     = "Stripe-Should-Retry"
	StripeRequestIDHeader       = "Request-Id"
	StripeOriginalRequestHeader = "Original-Request"
)

// stripeKinds is each refusal kind as Stripe answers it: its status, and
// its error's type and code. A key reused with other parameters is 400
// idempotency_error, final. What a retry with the same key gets past (a
// key in use by a request in flight, the store unavailable, and a failed
// execution a retry resumes: Error.ShouldRetry) is 429 lock_timeout,
// Stripe's one answer its clients retry by their own rules (stripe-go
// retries no other error object, whatever Stripe-Should-Retry says), with
// the kind's type: idempotency_error for a key in use, api_error for a
// failure. What the client sent wrong is an invalid_request_error; what
// failed on the server's side, for good, an api_error.
var stripeKinds = map[idemtype.ErrorKind]struct {
	status    int
	typ, code string
}{
	idemtype.KindMissingKey:       {400, StripeInvalidRequestError, ""},
	idemtype.KindInvalidKey:       {400, StripeInvalidRequestError, ""},
	idemtype.KindInvalidRequest:   {400, StripeInvalidRequestError, ""},
	idemtype.KindMissingScope:     {401, StripeInvalidRequestError, ""},
	idemtype.KindInvalidScope:     {400, StripeInvalidRequestError, ""},
	idemtype.KindMismatch:         {400, StripeIdempotencyError, ""},
	idemtype.KindInFlight:         {http.StatusTooManyRequests, StripeIdempotencyError, StripeLockTimeout},
	idemtype.KindNotImplemented:   {501, StripeAPIError, ""},
	idemtype.KindFailed:           {500, StripeAPIError, ""},
	idemtype.KindUnavailable:      {http.StatusTooManyRequests, StripeAPIError, StripeLockTimeout},
	idemtype.KindNotStored:        {410, StripeAPIError, ""},
	idemtype.KindTooLarge:         {413, StripeInvalidRequestError, ""},
	idemtype.KindMediaType:        {415, StripeInvalidRequestError, ""},
	idemtype.KindInvalidSignature: {401, StripeInvalidRequestError, ""},
}

// StripeRefusal is the Stripe error object of refusal e: its type and code
// as Stripe documents them for idempotency errors, and its message in
// words (Error.Message).
func StripeRefusal(e *idemtype.Error) StripeError {
	k, ok := stripeKinds[e.Kind]
	if !ok {
		k.typ = StripeAPIError
	}
	if e.ShouldRetry() {
		k.code = StripeLockTimeout
	}
	return StripeError{Error: StripeErrorBody{Type: k.typ, Code: k.code, Message: e.Message()}}
}

// StripeRefusalStatuses are the statuses Stripe answers each refusal kind
// with, where they differ from the kind's own: a reused key is 400.
func StripeRefusalStatuses() map[idemtype.ErrorKind]int {
	out := map[idemtype.ErrorKind]int{}
	for kind, k := range stripeKinds {
		if k.status != kind.Status() {
			out[kind] = k.status
		}
	}
	return out
}

// StripeHeaders are the headers Stripe's clients read: Request-Id on every
// answer, the key echoed, Original-Request on a replay, and
// Stripe-Should-Retry on a refusal.
func StripeHeaders() idemapi.Headers {
	return idemapi.Headers{RequestID: StripeRequestIDHeader, EchoKey: true, OriginalRequest: StripeOriginalRequestHeader, ShouldRetry: StripeShouldRetryHeader}
}

// Stripe is Stripe's contract: refusals as Stripe's error object with
// Stripe's statuses (StripeRefusal), and Stripe's headers (StripeHeaders;
// set Headers.NewRequestID on the result to make the ids another way).
// Keys are the operations' (x-idempotency key.format raw, which the
// config's preset: stripe sets). docs/adopting.md, "A Stripe-compatible
// API", is the worked example.
func Stripe() idemapi.Contract { return StripeWith(nil) }

// StripeWith is Stripe with statuses in place of Stripe's for the kinds it
// names: the config's refusal-statuses, which the glue's Contract passes so
// that the service answers what its enriched spec documents.
func StripeWith(statuses map[idemtype.ErrorKind]int) idemapi.Contract {
	all := StripeRefusalStatuses()
	maps.Copy(all, statuses)
	format := idemapi.JSONRefusalFormat{Body: func(e *idemtype.Error) any { return StripeRefusal(e) }, Statuses: all}
	refusals := func(e *idemtype.Error, problem *idemtype.Response) *idemtype.Response {
		resp := format.Render(e, problem)
		if _, set := statuses[e.Kind]; e.ShouldRetry() && !set {
			// A failed execution a retry resumes, as a key in use.
			resp.Status = http.StatusTooManyRequests
		}
		return resp
	}
	return idemapi.Contract{Headers: StripeHeaders(), Refusals: refusals}
}
