package idemtype

import "fmt"

// KeyFormat restricts key values.
type KeyFormat string

// The key formats.
const (
	KeyFormatAny  KeyFormat = "any"  // any printable ASCII
	KeyFormatUUID KeyFormat = "uuid" // an RFC 9562 UUID in its 36-character form
)

// ParseKeyFormat parses a key.format value: any or uuid.
func ParseKeyFormat(s string) (KeyFormat, error) {
	switch f := KeyFormat(s); f {
	case KeyFormatAny, KeyFormatUUID:
		return f, nil
	}
	return "", fmt.Errorf("format %q is not one of any, uuid", s)
}

func (f KeyFormat) String() string { return string(f) }

// Ambiguous says what happens when an execution fails after it may have had
// effects (a local phase committed, or a foreign call was attempted).
type Ambiguous string

// The ambiguous modes.
const (
	// AmbiguousResume keeps the record claimed at its recovery point and
	// gives up the lease, so a retry with the same key continues from there.
	AmbiguousResume Ambiguous = "resume"
	// AmbiguousStore stores the 500 response and replays it (Stripe v1).
	AmbiguousStore Ambiguous = "store"
)

// ParseAmbiguous parses an ambiguous value: resume or store.
func ParseAmbiguous(s string) (Ambiguous, error) {
	switch a := Ambiguous(s); a {
	case AmbiguousResume, AmbiguousStore:
		return a, nil
	}
	return "", fmt.Errorf("ambiguous %q is not one of resume, store", s)
}

func (a Ambiguous) String() string { return string(a) }

// Complete says who finishes an execution its owner abandoned.
type Complete string

// The completion modes.
const (
	// CompleteOnRetry leaves abandoned executions to the client's retry.
	CompleteOnRetry Complete = "on-retry"
	// CompleteBackground also lets the completer finish them from the
	// stored request, without a retry.
	CompleteBackground Complete = "background"
)

// ParseComplete parses a complete value: on-retry or background.
func ParseComplete(s string) (Complete, error) {
	switch c := Complete(s); c {
	case CompleteOnRetry, CompleteBackground:
		return c, nil
	}
	return "", fmt.Errorf("complete %q is not one of on-retry, background", s)
}

func (c Complete) String() string { return string(c) }

// PhaseKind says where a phase runs.
type PhaseKind string

// The phase kinds.
const (
	// PhaseLocal runs in a transaction of the idempotency store's database,
	// whose commit also records the phase as done.
	PhaseLocal PhaseKind = "local"
	// PhaseForeign runs outside any transaction (a call to another system),
	// with a key derived from the request's, the same on every retry.
	PhaseForeign PhaseKind = "foreign"
)

// ParsePhaseKind parses a phase kind: local or foreign.
func ParsePhaseKind(s string) (PhaseKind, error) {
	switch k := PhaseKind(s); k {
	case PhaseLocal, PhaseForeign:
		return k, nil
	}
	return "", fmt.Errorf("phase kind %q is not one of local, foreign", s)
}

func (k PhaseKind) String() string { return string(k) }
