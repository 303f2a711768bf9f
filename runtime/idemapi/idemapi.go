// Package idemapi is an API's contract with its clients on the answers of
// its idempotent operations, apart from the engine that makes them: the
// headers clients read on every answer (a request id, the key echoed, a
// replay's original request, whether a refusal is worth a retry), and the
// shape of refusals (RFC 9457 problem+json, or the API's own JSON error
// object).
//
// An engine takes a Contract in idem.Options.Contract and adapters answer
// every refusal with its Refusal. Vendors' contracts, complete, are in
// runtime/idempreset.
package idemapi

import (
	"crypto/rand"
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Contract is what an API's clients read besides the operations' own
// answers. The zero Contract answers refusals with problem+json and sends
// none of Headers.
type Contract struct {
	// Headers are sent on the answers of idempotent operations.
	Headers Headers
	// Refusals, when set, renders the protocol's refusals (missing or
	// invalid key, reused key, in flight, failed, unavailable, not stored,
	// invalid signature, ...) in the API's own error format: it gets the
	// refusal and its default response (Problem) and returns the response
	// to send, whose status, headers and body it chooses (JSONRefusals
	// covers the common case). The default's Retry-After and Link stay on
	// what it returns. Nil: problem+json.
	Refusals func(e *idemtype.Error, problem *idemtype.Response) *idemtype.Response
	// PolicyURL, when set, is linked from every refusal
	// (Link: <PolicyURL>; rel="describedby").
	PolicyURL string
}

// Refusal renders a protocol error as the response to send: Problem, or
// what Refusals makes of it, with the default's Retry-After and Link kept,
// and Headers.ShouldRetry set. Adapters answer every refusal with it.
func (c Contract) Refusal(err *idemtype.Error) *idemtype.Response {
	problem := Problem(err, c.PolicyURL)
	resp := problem
	if c.Refusals != nil {
		if r := c.Refusals(err, problem); r != nil {
			resp = r
			if resp.Header == nil {
				resp.Header = http.Header{}
			}
			for _, h := range []string{"Retry-After", "Link"} {
				if v := problem.Header.Get(h); v != "" {
					resp.Header.Set(h, v)
				}
			}
			if resp.Status == 0 {
				resp.Status = problem.Status
			}
		}
	}
	if name := c.Headers.ShouldRetry; name != "" {
		resp.Header.Set(name, strconv.FormatBool(err.ShouldRetry()))
	}
	return resp
}

// Problem renders a protocol error as a complete RFC 9457 response:
// status, Content-Type application/problem+json, Retry-After where it
// applies, a Link to the published policy when policyURL is set, and the
// JSON body (Error.Problem).
func Problem(e *idemtype.Error, policyURL string) *idemtype.Response {
	body, _ := json.Marshal(e.Problem())
	h := http.Header{}
	h.Set("Content-Type", idemtype.ProblemContentType)
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	if policyURL != "" {
		h.Set("Link", "<"+policyURL+`>; rel="describedby"`)
	}
	return &idemtype.Response{Status: e.Status(), Header: h, Body: body}
}

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
	// Stripe-Should-Retry; see idemtype.Error.ShouldRetry).
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
	out := make([]byte, 4, 18)
	copy(out, "req_")
	var b [1]byte
	for len(out) < cap(out) {
		rand.Read(b[:])
		if c := int(b[0] & 63); c < len(alphabet) {
			out = append(out, alphabet[c])
		}
	}
	return string(out)
}

// JSONRefusalFormat renders refusals as an API's own JSON error object:
// Body makes the object, Statuses give kinds other statuses than their own,
// and Header, when set, adds headers to each refusal. Its Render is a
// Contract.Refusals.
type JSONRefusalFormat struct {
	Body     func(*idemtype.Error) any
	Statuses map[idemtype.ErrorKind]int
	Header   func(*idemtype.Error, http.Header)
}

// Render is f as a Contract.Refusals: the object Body makes, as
// Content-Type application/json, with the status Statuses gives the kind
// (or else its own) and the headers Header sets.
func (f JSONRefusalFormat) Render(e *idemtype.Error, problem *idemtype.Response) *idemtype.Response {
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
	return &idemtype.Response{Status: status, Header: h, Body: b}
}

// JSONRefusals returns a Contract.Refusals for an API whose errors are one
// JSON object (Stripe's {"error": {...}}, or any other): body makes that
// object for a refusal, sent as Content-Type application/json, with the
// status statuses gives its kind, or else the kind's own (a service that
// answers a reused key with 400 sets {idemtype.KindMismatch: 400}). It is
// JSONRefusalFormat{Body: body, Statuses: statuses}.Render; the format
// also sets headers.
func JSONRefusals(body func(*idemtype.Error) any, statuses map[idemtype.ErrorKind]int) func(*idemtype.Error, *idemtype.Response) *idemtype.Response {
	return JSONRefusalFormat{Body: body, Statuses: statuses}.Render
}
