// Package spec is the x-idempotency OpenAPI extension: its Go model, its
// defaults, and its validation with errors that name the file, the
// operation, the field, the bad value and what is allowed.
package spec

import (
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// ExtensionName is the OpenAPI extension this package reads.
const ExtensionName = "x-idempotency"

// Extension is one operation's x-idempotency object, with defaults applied.
type Extension struct {
	Key   Key
	Scope Scope
	// Placement is the value of the request the operation's records are
	// placed by (a tenant's or an account's id), for a records table laid
	// out by placement on Citus; zero for none.
	Placement idemtype.Placement
	// NaturalKey lists the request values that identify the operation's
	// intent in business terms (body:<pointer>, path:<param>): a completed
	// record keeps their digest, for idemgen reconcile. None when empty.
	NaturalKey []idemtype.Placement
	Group      string // operations sharing one key namespace; "" for none
	Retention  time.Duration
	Lease      time.Duration
	// Wait is how long a duplicate waits for the execution in flight that
	// holds its key (0: not at all).
	Wait        time.Duration
	Fingerprint Fingerprint
	Request     Request
	Replay      Replay
	Ambiguous   idemtype.Ambiguous
	Complete    idemtype.Complete
	Phases      []Phase
	// Handler says the operation keeps its strict handler: the glue runs
	// the PlainHandlers method through the engine (idem.RunHandler), its
	// database work in the execution's transactions and its calls to other
	// systems in steps (idem.Local, idem.Foreign); Phases is then the
	// default and unused.
	Handler bool
}

// Key is where the key comes from and what it may look like: a request
// header, or a member of the JSON request body (a webhook's event id).
type Key struct {
	Header    string // the request header carrying the key; "" when Pointer is set
	Pointer   string // a JSON Pointer into the JSON request body; "" for a header key
	Required  bool   // always true for a body key
	MaxLength int
	// MinLength refuses shorter keys (0: none); MinLengthSet says the
	// operation sets it, so that the config's key-min-length does not.
	MinLength    int
	MinLengthSet bool
	Format       idemtype.KeyFormat
	// FormatSet says the operation sets key.format itself: the config's
	// key-format (a spec-wide default) does not apply to it.
	FormatSet bool
}

// Source says where the key comes from, e.g. "header Idempotency-Key" or
// "pointer /id".
func (k Key) Source() string {
	if k.Pointer != "" {
		return "pointer " + k.Pointer
	}
	return "header " + k.Header
}

// Scope is what keys are unique within (besides the operation or group):
// the runtime's idemtype.Scope, parsed from the extension's string.
type Scope = idemtype.Scope

// Fingerprint says what request identity leaves out or adds.
type Fingerprint struct {
	Exclude []string // JSON Pointers into the body
	Headers []string // request headers that are part of identity
}

// Request bounds what of a request is read.
type Request struct {
	// MaxBodyBytes is the largest request body the operation takes (a
	// larger one is the request-too-large problem, 413, before anything is
	// claimed); 0 leaves it to the runtime's limit (1 MiB by default).
	MaxBodyBytes int
}

// MaxRequestBody is the largest request.maxBodyBytes the extension allows.
const MaxRequestBody = 1 << 30

// Replay says what of a response is stored.
type Replay struct {
	Headers      []string
	MaxBodyBytes int
	// Render, when set, are JSON Pointers into the successful answer's
	// body (its identifiers): the answer is stored compact (status,
	// headers, these values) and a replay renders it again with the
	// operation's Render method. MaxBodyBytes then does not apply.
	Render []string
}

// Phase is one step of the operation.
type Phase struct {
	Name    string
	Foreign bool
}

// Kind returns where the phase runs: idemtype.PhaseForeign or
// idemtype.PhaseLocal.
func (p Phase) Kind() idemtype.PhaseKind {
	if p.Foreign {
		return idemtype.PhaseForeign
	}
	return idemtype.PhaseLocal
}

// DefaultPhase names the one phase of an operation that lists none. The
// other defaults are the runtime's (idemtype.DefaultRetention and the
// rest), as documented in docs/extension.md.
const DefaultPhase = "execute"

// Default returns the extension that `x-idempotency: true` means.
func Default() *Extension {
	return &Extension{
		Key:       Key{Header: idemtype.DefaultKeyHeader, Required: true, MaxLength: idemtype.DefaultMaxKeyLength, Format: idemtype.KeyFormatAny},
		Scope:     Scope{Kind: idemtype.ScopePrincipal},
		Retention: idemtype.DefaultRetention,
		Lease:     idemtype.DefaultLease,
		Wait:      idemtype.DefaultWait,
		Replay:    Replay{Headers: idemtype.DefaultReplayHeaders(), MaxBodyBytes: idemtype.DefaultMaxReplayBody},
		Ambiguous: idemtype.AmbiguousResume,
		Complete:  idemtype.CompleteOnRetry,
		Phases:    []Phase{{Name: DefaultPhase}},
	}
}
