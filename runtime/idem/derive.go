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

// DeriveKey returns the idempotency key for a foreign call made by phase
// within the execution of (namespace, scope, key). It is deterministic, so
// every retry and resumption sends the foreign system the same key; it is
// ASCII (lowercase hex after the prefix) and length characters long, clamped
// to [20, 64]. Distinct inputs collide with probability 2^-(4*(length-4)).
func DeriveKey(namespace, scope, key, phase string, length int) string {
	if length <= 0 || length > MaxDerivedKeyLength {
		length = MaxDerivedKeyLength
	}
	if length < 20 {
		length = 20
	}
	h := sha256.New()
	for _, part := range []string{namespace, scope, key, phase} {
		// Length-prefix each part so ("ab","c") and ("a","bc") differ.
		var n [4]byte
		l := len(part)
		n[0], n[1], n[2], n[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return (DerivedKeyPrefix + hex.EncodeToString(h.Sum(nil)))[:length]
}
