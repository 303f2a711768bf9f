package idem

import (
	"crypto/sha256"
	"encoding/hex"
)

// DerivedKeyPrefix starts every derived key, so foreign systems' logs show
// where a key came from.
const DerivedKeyPrefix = "idg-"

// MaxDerivedKeyLength is the default and largest derived key length: it fits
// Stripe's and Adyen's limits.
const MaxDerivedKeyLength = 64

// KeyDerivation versions how derived keys are computed. Each record keeps
// the version it was claimed with, so an execution in flight across an
// upgrade presents the foreign system the same key on every attempt.
type KeyDerivation int16

const (
	// KeyDerivationV1 hashes (namespace, scope, key, phase). Records claimed
	// before migration 002 use it.
	KeyDerivationV1 KeyDerivation = 1
	// KeyDerivationV2 also hashes the request fingerprint: a key released
	// and reused with another request derives other foreign keys, so a
	// foreign system never sees one key with two sets of parameters.
	KeyDerivationV2 KeyDerivation = 2
)

// CurrentKeyDerivation is the version new claims use.
const CurrentKeyDerivation = KeyDerivationV2

// DeriveKey returns the idempotency key for a foreign call made by phase
// within the execution of (namespace, scope, key) for the request whose
// fingerprint is given (ignored by KeyDerivationV1). It is deterministic, so
// every retry and resumption sends the foreign system the same key; it is
// ASCII (lowercase hex after the prefix) and length characters long, clamped
// to [20, 64]. Distinct inputs collide with probability 2^-(4*(length-4)).
func DeriveKey(v KeyDerivation, namespace, scope, key, phase string, fingerprint []byte, length int) string {
	if length <= 0 || length > MaxDerivedKeyLength {
		length = MaxDerivedKeyLength
	}
	if length < 20 {
		length = 20
	}
	h := sha256.New()
	part := func(p []byte) {
		// Length-prefix each part so ("ab","c") and ("a","bc") differ.
		l := len(p)
		h.Write([]byte{byte(l >> 24), byte(l >> 16), byte(l >> 8), byte(l)})
		h.Write(p)
	}
	for _, p := range []string{namespace, scope, key, phase} {
		part([]byte(p))
	}
	if v != KeyDerivationV1 {
		part(fingerprint)
	}
	return (DerivedKeyPrefix + hex.EncodeToString(h.Sum(nil)))[:length]
}
