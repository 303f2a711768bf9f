package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/idemgen/idemgen/runtime/internal/adminlink"
)

// DerivedKeyPrefix starts every derived key, so foreign systems' logs show
// where a key came from.
const DerivedKeyPrefix = "idg-"

// MaxDerivedKeyLength is the default and largest derived key length: it fits
// Stripe's and Adyen's limits.
const MaxDerivedKeyLength = 64

// keyLength is the length of the derived keys of the claims this engine
// makes (Options.DerivedKeyLength, or MaxDerivedKeyLength).
func (e *Engine) keyLength() int {
	if e.opts.DerivedKeyLength == 0 {
		return MaxDerivedKeyLength
	}
	return e.opts.DerivedKeyLength
}

// keyDerivation versions how derived keys are computed. Each record keeps
// the version it was claimed with, so an execution in flight across an
// upgrade presents the foreign system the same key on every attempt.
type keyDerivation int16

const (
	// keyDerivationV1 hashes (namespace, scope, key, phase). Records claimed
	// before migration 002 use it.
	keyDerivationV1 keyDerivation = 1
	// keyDerivationV2 also hashes the request fingerprint: a key released
	// and reused with another request derives other foreign keys, so a
	// foreign system never sees one key with two sets of parameters.
	keyDerivationV2 keyDerivation = 2
	// keyDerivationV3 hashes the scope's digest (scopeDigest) where V2
	// hashes the scope: the records table keeps only the digest (a scope
	// is often a credential), and the background completer, which has
	// only what the table keeps, derives the same keys from it.
	keyDerivationV3 keyDerivation = 3
)

// currentKeyDerivation is the version new claims use.
const currentKeyDerivation = keyDerivationV3

// scopeDigest is the SHA-256 of a scope, in hex (idemadmin.ScopeDigest):
// what the records table keeps of a claim's scope, and what identifies a
// scope in logs (Engine.LogScope) without showing it.
func scopeDigest(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:])
}

// deriveKeyOf is idemadmin.DeriveKey, documented there.
func deriveKeyOf(v keyDerivation, namespace, scope, key, phase string, fingerprint []byte, length int) string {
	if v >= keyDerivationV3 {
		scope = scopeDigest(scope)
	}
	return deriveKey(v, namespace, scope, key, phase, fingerprint, length)
}

// deriveKey is deriveKeyOf with the scope as version v hashes it: the scope
// itself up to V2, its digest from V3 on.
func deriveKey(v keyDerivation, namespace, scope, key, phase string, fingerprint []byte, length int) string {
	if length <= 0 || length > MaxDerivedKeyLength {
		length = MaxDerivedKeyLength
	}
	if length < 20 {
		length = 20
	}
	var room [256]byte
	b := appendPart(appendPart(appendPart(appendPart(room[:0], namespace), scope), key), phase)
	if v != keyDerivationV1 {
		b = appendPart(b, string(fingerprint))
	}
	sum := sha256.Sum256(b)
	return (DerivedKeyPrefix + hex.EncodeToString(sum[:]))[:length]
}

// appendPart appends p preceded by its length (4 bytes, big-endian), so
// that the parts of a digest stay apart: ("ab", "c") and ("a", "bc")
// differ. DeriveKey, recordID and receiptFingerprint hash such parts.
func appendPart(dst []byte, p string) []byte {
	return append(binary.BigEndian.AppendUint32(dst, uint32(len(p))), p...)
}

// recordID is the id of the record of (namespace, scope, key): the
// primary key, by which every statement finds it (a completed record keeps
// no key of its own). It is the SQL function record_id of migration 005,
// which the migration and operators use (TestRecordID compares them): 16
// bytes of SHA-256 over the three parts, except that a key that is a
// UUIDv7 in its text form gives its first 8 bytes, its time, to the id's
// first 8, so that new records arrive in the primary key's order.
func recordID(namespace, scope, key string) [16]byte {
	var room [256]byte
	sum := sha256.Sum256(appendPart(appendPart(appendPart(room[:0], namespace), scope), key))
	var id [16]byte
	if t, ok := uuidv7Time(key); ok {
		copy(id[:8], t[:])
		copy(id[8:], sum[:8])
		return id
	}
	copy(id[:], sum[:16])
	return id
}

// uuidv7Time returns the first 8 bytes of key when it is a UUIDv7 in its
// text form (hex digits of either case, version 7, variant 10xx), as the
// SQL function's pattern matches it.
func uuidv7Time(key string) (t [8]byte, ok bool) {
	if len(key) != 36 || key[8] != '-' || key[13] != '-' || key[18] != '-' || key[23] != '-' || key[14] != '7' {
		return t, false
	}
	switch key[19] {
	case '8', '9', 'a', 'b', 'A', 'B':
	default:
		return t, false
	}
	var digits [32]byte // the five groups, without the hyphens
	n := copy(digits[:], key[:8])
	n += copy(digits[n:], key[9:13])
	n += copy(digits[n:], key[14:18])
	n += copy(digits[n:], key[19:23])
	copy(digits[n:], key[24:])
	var all [16]byte
	if _, err := hex.Decode(all[:], digits[:]); err != nil {
		return t, false
	}
	copy(t[:], all[:8])
	return t, true
}

// receiptFingerprint is what a completed record keeps of the operation and
// the request's fingerprint: the first 16 bytes of SHA-256 over the
// operation as a part, then the fingerprint. It is the SQL function
// receipt_fingerprint of migration 005 (TestReceiptFingerprint compares
// them).
func receiptFingerprint(op string, fp []byte) []byte {
	var room [256]byte
	sum := sha256.Sum256(append(appendPart(room[:0], op), fp...))
	return sum[:16]
}

// naturalKeyOf is what a record keeps of its request's natural key (given,
// idemtype.NaturalKeyDigest of the operation and the values): the first 16
// bytes of SHA-256 over the record's namespace and scope as parts, then
// the digest, so that two callers' (scopes') requests with the same values
// are two intents, as their keys are.
func naturalKeyOf(namespace, scope string, given []byte) []byte {
	var room [256]byte
	sum := sha256.Sum256(append(appendPart(appendPart(room[:0], namespace), scope), given...))
	return sum[:16]
}

func init() {
	adminlink.NaturalKey = func(namespace, scope string, given []byte) []byte { return naturalKeyOf(namespace, scope, given) }
	adminlink.DeriveKey = func(v int16, namespace, scope, key, phase string, fingerprint []byte, length int) string {
		return deriveKeyOf(keyDerivation(v), namespace, scope, key, phase, fingerprint, length)
	}
	adminlink.ScopeDigest = scopeDigest
}
