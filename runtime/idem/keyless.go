package idem

import "context"

// MaxKeylessClients bounds the distinct clients EventKeyless names: past
// it, a new client is counted as "other", so that a metric's labels stay
// few whatever the User-Agents sent.
const MaxKeylessClients = 64

// Keyless observes a request without a key to op, whose key is optional,
// from client (the User-Agent's product, idemhttp.KeylessClient):
// EventKeyless. The adapters call it before they run such a request
// unprotected.
func (e *Engine) Keyless(ctx context.Context, op *Operation, client string) {
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
