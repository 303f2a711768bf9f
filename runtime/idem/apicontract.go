package idem

import (
	"crypto/rand"
	"encoding/json"
	"maps"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// An API's contract with its clients goes beyond its operations: the
// headers they read on every answer (a request id, the key echoed, a
// replay's original request), and the shape of its errors. Options.Headers
// and Options.Refusals carry it; Stripe is one such contract, complete.

// Headers are the headers an API's clients read on the answers of its
// idempotent operations, besides Idempotent-Replayed (always sent on a
// replay) and Retry-After (on a refusal a retry may get past). The zero
// Headers sends none of them.
type Headers struct {
	// RequestID names the header that carries a new id on every answer
	// (Stripe's Request-Id): each request gets one, logged with the
	// request's line. "" sends none.
	RequestID string
	// NewRequestID makes a request's id; nil: NewRequestID.
	NewRequestID func() string
	// EchoKey sends a keyed request's key back, in the operation's key
	// header, on every answer to it (stripe-go reads it as
	// LastResponse.IdempotencyKey).
	EchoKey bool
	// OriginalRequest names the header that, on a replay, carries the id
	// of the request whose execution made the answer (Stripe's
	// Original-Request); the replay's own id is in RequestID. It needs
	// RequestID: the id is stored with the response, under RequestID.
	OriginalRequest string
	// ShouldRetry names the header that says on every refusal whether a
	// retry with the same key may get past it, "true" or "false" (Stripe's
	// Stripe-Should-Retry; see Error.ShouldRetry).
	ShouldRetry string
}

// IsZero reports whether h sends no header.
func (h Headers) IsZero() bool {
	return h.RequestID == "" && !h.EchoKey && h.OriginalRequest == "" && h.ShouldRetry == ""
}

// NewID returns a new request id, with h.NewRequestID or NewRequestID.
func (h Headers) NewID() string {
	if h.NewRequestID != nil {
		return h.NewRequestID()
	}
	return NewRequestID()
}

// NewRequestID returns a new request id as Stripe spells them: "req_" and
// 14 random letters and digits (83 bits).
func NewRequestID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	return "req_" + randomFrom(alphabet, 14)
}

// randomFrom returns n characters of alphabet (at most 64 of them), drawn
// uniformly at random.
func randomFrom(alphabet string, n int) string {
	out := make([]byte, n)
	var b [1]byte
	for i := 0; i < n; {
		rand.Read(b[:])
		if c := int(b[0] & 63); c < len(alphabet) {
			out[i] = alphabet[c]
			i++
		}
	}
	return string(out)
}

// storedHeaders are the headers of c's response as they are stored and
// sent: those its policy allows (Policy.storedHeaders), the request's id
// when a replay is to send it as the original request's, and a stored
// refusal's retry hint (Headers.ShouldRetry).
func (e *Engine) storedHeaders(c *claim, h http.Header) http.Header {
	out := c.policy.storedHeaders(h)
	hs := e.opts.Headers
	if hs.RequestID != "" && hs.OriginalRequest != "" && c.requestID != "" {
		out.Set(hs.RequestID, c.requestID)
	}
	if v := h.Get(hs.ShouldRetry); hs.ShouldRetry != "" && v != "" {
		// A stored failure's hint (ambiguous: store): false, on its
		// first answer and every replay.
		out.Set(hs.ShouldRetry, v)
	}
	return out
}

// LogScope is scope as the engine's log lines show it
// (Options.RedactScope; by default "sha256:" and ScopeDigest's first 16
// hex digits). "" stays "": the global scope.
func (e *Engine) LogScope(scope string) string {
	switch {
	case scope == "":
		return ""
	case e != nil && e.opts.RedactScope != nil:
		return e.opts.RedactScope(scope)
	}
	return "sha256:" + ScopeDigest(scope)[:16]
}

// Headers are the engine's Options.Headers, for adapters; none for a nil
// engine.
func (e *Engine) Headers() Headers {
	if e == nil {
		return Headers{}
	}
	return e.opts.Headers
}

// JSONRefusalFormat renders refusals as an API's own JSON error object:
// Body makes the object, Statuses give kinds other statuses than their own,
// and Header, when set, adds headers to each refusal. Its Render is an
// Options.Refusals.
type JSONRefusalFormat struct {
	Body     func(*Error) any
	Statuses map[idemtype.ErrorKind]int
	Header   func(*Error, http.Header)
}

// Render is f as an Options.Refusals: the object Body makes, as
// Content-Type application/json, with the status Statuses gives the kind
// (or else its own) and the headers Header sets.
func (f JSONRefusalFormat) Render(e *Error, problem *Response) *Response {
	b, err := json.Marshal(f.Body(e))
	if err != nil {
		return problem
	}
	status := e.Status()
	if s, ok := f.Statuses[e.Kind]; ok {
		status = s
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if f.Header != nil {
		f.Header(e, h)
	}
	return &Response{Status: status, Header: h, Body: b}
}

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
func StripeRefusal(e *Error) StripeError {
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
func StripeHeaders() Headers {
	return Headers{RequestID: StripeRequestIDHeader, EchoKey: true, OriginalRequest: StripeOriginalRequestHeader, ShouldRetry: StripeShouldRetryHeader}
}

// Stripe returns opts with Stripe's contract: refusals as Stripe's error
// object with Stripe's statuses (StripeRefusal), and Stripe's headers
// (StripeHeaders; opts.Headers.NewRequestID, if set, still makes the
// ids). Keys are the operations' (x-idempotency key.format raw, which the
// config's preset: stripe sets). docs/adopting.md, "A Stripe-compatible
// API", is the worked example.
func Stripe(opts Options) Options { return StripeWith(opts, nil) }

// StripeWith is Stripe with statuses in place of Stripe's for the kinds it
// names: the config's refusal-statuses, which the glue's Contract passes so
// that the service answers what its enriched spec documents.
func StripeWith(opts Options, statuses map[idemtype.ErrorKind]int) Options {
	all := StripeRefusalStatuses()
	maps.Copy(all, statuses)
	format := JSONRefusalFormat{Body: func(e *Error) any { return StripeRefusal(e) }, Statuses: all}
	opts.Refusals = func(e *Error, problem *Response) *Response {
		resp := format.Render(e, problem)
		if _, set := statuses[e.Kind]; e.ShouldRetry() && !set {
			// A failed execution a retry resumes, as a key in use.
			resp.Status = http.StatusTooManyRequests
		}
		return resp
	}
	h := StripeHeaders()
	h.NewRequestID = opts.Headers.NewRequestID
	opts.Headers = h
	return opts
}
