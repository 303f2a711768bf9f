package idemtype

import (
	"fmt"
	"strings"
)

// KeyFormat restricts key values.
type KeyFormat string

// The key formats.
const (
	// KeyFormatAny: an RFC 8941 string ("abc", as the IETF draft
	// specifies), unquoted, or a bare value of printable ASCII without
	// quotes, commas, backslashes or spaces; "k" and k are one key.
	KeyFormatAny KeyFormat = "any"
	// KeyFormatUUID: an RFC 9562 UUID in its 36-character form, quoted or
	// bare.
	KeyFormatUUID KeyFormat = "uuid"
	// KeyFormatRaw: the header's value as sent (what Stripe's clients
	// send): any printable UTF-8, spaces included, MaxLength characters at
	// most; nothing is unquoted, so "k" and k are two keys.
	KeyFormatRaw KeyFormat = "raw"
)

// ParseKeyFormat parses a key.format value: any, uuid or raw.
func ParseKeyFormat(s string) (KeyFormat, error) {
	return parseOne("format", s, KeyFormatAny, KeyFormatUUID, KeyFormatRaw)
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
	return parseOne("ambiguous", s, AmbiguousResume, AmbiguousStore)
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
	return parseOne("complete", s, CompleteOnRetry, CompleteBackground)
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
	return parseOne("phase kind", s, PhaseLocal, PhaseForeign)
}

func (k PhaseKind) String() string { return string(k) }

// parseOne returns s as the one of values it spells, or an error naming
// what was parsed and the values allowed.
func parseOne[T ~string](what, s string, values ...T) (T, error) {
	names := make([]string, len(values))
	for i, v := range values {
		if string(v) == s {
			return v, nil
		}
		names[i] = string(v) // for the error, should none match
	}
	return "", fmt.Errorf("%s %q is not one of %s", what, s, strings.Join(names, ", "))
}
