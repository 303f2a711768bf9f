package idem

import (
	"context"
	"strings"
)

// MaxKeylessClients bounds the distinct clients EventKeyless names: past
// it, a new client is counted as "other", so that a metric's labels stay
// few whatever the User-Agents sent.
const MaxKeylessClients = 64

// Keyless observes a request without a key to op, whose key is optional,
// from the client its User-Agent names (KeylessClient): EventKeyless. The
// adapters call it before they run such a request unprotected.
func (e *Engine) Keyless(ctx context.Context, op *Operation, userAgent string) {
	client := KeylessClient(userAgent)
	if _, ok := e.keyless.Load(client); !ok {
		if e.keylessN.Add(1) > MaxKeylessClients {
			e.keylessN.Add(-1)
			client = "other"
		} else if _, loaded := e.keyless.LoadOrStore(client, true); loaded {
			e.keylessN.Add(-1)
		}
	}
	e.observe(ctx, Event{Kind: EventKeyless, Operation: op.ID, Cause: client})
}

// KeylessClient is the client a User-Agent names, as EventKeyless counts
// it: its first product token without its version ("checkout-web/2.1
// (x)" is "checkout-web"), at most 40 of the characters letters, digits,
// '.', '_' and '-' (others become '_'); "unknown" when there is none. A
// principal is not used: it is often a credential, and there are as many
// as tenants.
func KeylessClient(userAgent string) string {
	tok, _, _ := strings.Cut(strings.TrimSpace(userAgent), " ")
	tok, _, _ = strings.Cut(tok, "/")
	if tok == "" {
		return "unknown"
	}
	b := []byte(tok[:min(len(tok), 40)])
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}
