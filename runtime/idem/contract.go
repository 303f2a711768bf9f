package idem

// The engine's side of the API contract (Options.Contract, runtime/idemapi):
// what it stores with a response, and how it names a scope in logs.

import (
	"net/http"

	"github.com/idemgen/idemgen/runtime/idemapi"
)

// storedHeaders are the headers of c's response as they are stored and
// sent: those its policy allows (Policy.storedHeaders), the request's id
// when a replay is to send it as the original request's, and a stored
// refusal's retry hint (idemapi.Headers.ShouldRetry).
func (e *Engine) storedHeaders(c *claim, h http.Header) http.Header {
	out := c.policy.storedHeaders(h)
	hs := e.opts.Contract.Headers
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
// (Options.RedactScope; by default "sha256:" and idemadmin.ScopeDigest's first 16
// hex digits). "" stays "": the global scope.
func (e *Engine) LogScope(scope string) string {
	switch {
	case scope == "":
		return ""
	case e != nil && e.opts.RedactScope != nil:
		return e.opts.RedactScope(scope)
	}
	return "sha256:" + scopeDigest(scope)[:16]
}

// Contract is the engine's Options.Contract, for adapters: they answer
// every refusal with its Refusal and send its Headers. The zero Contract
// for a nil engine.
func (e *Engine) Contract() idemapi.Contract {
	if e == nil {
		return idemapi.Contract{}
	}
	return e.opts.Contract
}

// refusal renders err by the engine's contract.
func (e *Engine) refusal(err *Error) *Response { return e.opts.Contract.Refusal(err) }
