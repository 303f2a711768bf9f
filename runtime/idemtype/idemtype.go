// Package idemtype is the vocabulary of the Idempotency-Key protocol as
// idemgen speaks it: the values of the x-idempotency extension (scopes, key
// formats, what an ambiguous failure does, who completes an abandoned
// execution, phase kinds), the protocol's errors with their HTTP statuses
// and problem+json types, the defaults, the response headers that are
// never stored, and JSON Pointers.
//
// It is a leaf: it imports only the standard library, so that the spec
// parser, the generator, the HTTP layer and the engine share one language
// without depending on each other, and generated code can name these values
// without pulling in PostgreSQL or a web framework.
//
// Each string-valued type's values are part of the public contract: they
// are what a spec writes, what problem type URIs carry, and they never
// change. Parse functions accept exactly those values; String returns them.
package idemtype

import "time"

// Defaults, as documented for the x-idempotency extension
// (docs/extension.md). The spec parser fills them in, and the runtime
// applies them to zero fields.
const (
	// DefaultKeyHeader is the request header that carries the key.
	DefaultKeyHeader = "Idempotency-Key"
	// DefaultMaxKeyLength is the longest key accepted, in bytes.
	DefaultMaxKeyLength = 255
	// DefaultRetention is how long a key is remembered.
	DefaultRetention = 24 * time.Hour
	// DefaultLease is how long a claim is exclusive without renewal. An
	// owner renews it every third of its length while it runs, so a lease
	// runs out only when its owner died or stalled: a retry then takes the
	// execution over within this long (docs/decisions.md).
	DefaultLease = 5 * time.Second
	// DefaultWait is how long a duplicate waits for the execution in
	// flight that holds its key before it is answered 409: two default
	// leases, so that a duplicate that arrives just after the owner died is
	// answered by the takeover that resumes the execution.
	DefaultWait = 10 * time.Second
	// MaxWait is the longest wait: a minute, beyond the timeouts of most
	// clients and proxies.
	MaxWait = time.Minute
	// MaxLease is the longest lease: 24 days, under the 2^31-1
	// milliseconds (about 24.8 days) that PostgreSQL's statement_timeout
	// and idle_in_transaction_session_timeout, which bound a claim's open
	// transaction by the lease, can hold.
	MaxLease = 24 * 24 * time.Hour
	// DefaultMaxReplayBody is the largest response body stored for replay,
	// in bytes.
	DefaultMaxReplayBody = 64 << 10
)

// DefaultReplayHeaders returns the response headers stored and replayed
// when a policy names none: Content-Type and Location. The slice is new on
// every call.
func DefaultReplayHeaders() []string { return []string{"Content-Type", "Location"} }

// ReplayedHeader is set to "true" on every replayed response.
const ReplayedHeader = "Idempotent-Replayed"
