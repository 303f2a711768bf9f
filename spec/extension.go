// Package spec is the x-idempotency OpenAPI extension: its Go model, its
// defaults, and its validation with errors that name the file, the
// operation, the field, the bad value and what is allowed.
package spec

import "time"

// ExtensionName is the OpenAPI extension this package reads.
const ExtensionName = "x-idempotency"

// Extension is one operation's x-idempotency object, with defaults applied.
type Extension struct {
	Key         Key
	Scope       Scope
	Group       string // operations sharing one key namespace; "" for none
	Retention   time.Duration
	Lease       time.Duration
	Fingerprint Fingerprint
	Replay      Replay
	Ambiguous   string // resume | store
	Complete    string // on-retry | background
	Phases      []Phase
}

// Key is where the key comes from and what it may look like: a request
// header, or a member of the JSON request body (a webhook's event id).
type Key struct {
	Header    string // the request header carrying the key; "" when Pointer is set
	Pointer   string // a JSON Pointer into the JSON request body; "" for a header key
	Required  bool   // always true for a body key
	MaxLength int
	Format    string // any | uuid
}

// Source says where the key comes from, e.g. "header Idempotency-Key" or
// "pointer /id".
func (k Key) Source() string {
	if k.Pointer != "" {
		return "pointer " + k.Pointer
	}
	return "header " + k.Header
}

// Scope is what keys are unique within (besides the operation or group).
type Scope struct {
	Kind   string // principal | header | global | sender
	Header string // for Kind header
	Sender string // for Kind sender: the name of the runtime's verifier
}

// String returns the scope as written in the extension.
func (s Scope) String() string {
	switch s.Kind {
	case "header":
		return "header:" + s.Header
	case "sender":
		return "sender:" + s.Sender
	}
	return s.Kind
}

// Fingerprint says what request identity leaves out or adds.
type Fingerprint struct {
	Exclude []string // JSON Pointers into the body
	Headers []string // request headers that are part of identity
}

// Replay says what of a response is stored.
type Replay struct {
	Headers      []string
	MaxBodyBytes int
}

// Phase is one step of the operation.
type Phase struct {
	Name    string
	Foreign bool
}

// Defaults, as documented in docs/extension.md.
const (
	DefaultHeader       = "Idempotency-Key"
	DefaultMaxLength    = 255
	DefaultRetention    = 24 * time.Hour
	DefaultLease        = 30 * time.Second
	DefaultMaxBodyBytes = 65536
	DefaultPhase        = "execute"
)

// DefaultReplayHeaders are stored with a response unless replay.headers is set.
var DefaultReplayHeaders = []string{"Content-Type", "Location"}

// Default returns the extension that `x-idempotency: true` means.
func Default() *Extension {
	return &Extension{
		Key:       Key{Header: DefaultHeader, Required: true, MaxLength: DefaultMaxLength, Format: "any"},
		Scope:     Scope{Kind: "principal"},
		Retention: DefaultRetention,
		Lease:     DefaultLease,
		Replay:    Replay{Headers: append([]string(nil), DefaultReplayHeaders...), MaxBodyBytes: DefaultMaxBodyBytes},
		Ambiguous: "resume",
		Complete:  "on-retry",
		Phases:    []Phase{{Name: DefaultPhase}},
	}
}
