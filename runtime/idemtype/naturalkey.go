package idemtype

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
)

// A natural key names the request values that identify an operation's
// intent in business terms (an order reference, an invoice number): two
// requests with the same values are one intent, whatever their
// idempotency keys. x-idempotency's natural-key lists them, each a body
// JSON Pointer (body:/order_ref) or a path parameter (path:id); a
// completed record keeps only a digest (of NaturalKeyDigest's, with its
// namespace and scope: idemadmin.NaturalKey), so that an
// operator can count the intents executed under more than one key
// (idemgen reconcile), a duplicate effect despite keys.

// ParseNaturalKeyPart reads one value of a natural key: body:<JSON
// Pointer> or path:<parameter>, as ParsePlacement reads them.
func ParseNaturalKeyPart(s string) (Placement, error) {
	if kind, _, _ := strings.Cut(s, ":"); kind != string(PlacementBody) && kind != string(PlacementPath) {
		return Placement{}, fmt.Errorf("natural-key %q: want body:<JSON Pointer> or path:<parameter>, the request values that name the intent (such as body:/order_ref)", s)
	}
	p, err := ParsePlacement(s)
	if err != nil {
		return p, fmt.Errorf("natural-key %q: want body:<JSON Pointer> (such as body:/order_ref) or path:<parameter>", s)
	}
	return p, nil
}

// NaturalKeyDigest is the natural key of a request of operation with the
// natural key's values, in the order the operation lists them: 16 bytes of
// SHA-256 over the operation and the values, each preceded by its length,
// so that no two lists of values share a digest. The engine keeps, in the
// completed record, a digest of it with the record's namespace and scope
// (idemadmin.NaturalKey computes it, as idemgen reconcile lists it).
func NaturalKeyDigest(operation string, values []string) []byte {
	h := sha256.New()
	var n [4]byte
	for _, v := range append([]string{operation}, values...) {
		binary.BigEndian.PutUint32(n[:], uint32(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	return h.Sum(nil)[:16]
}

// NaturalKeyString writes parts as the extension lists them.
func NaturalKeyString(parts []Placement) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.String()
	}
	return strings.Join(out, ", ")
}
