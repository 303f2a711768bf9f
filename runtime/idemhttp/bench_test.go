package idemhttp

import (
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// paymentBody is a typical request body of a payment API: a few scalar
// members out of order, a nested object, an excluded client clock.
var paymentBody = []byte(`{"amount":1250,"currency":"EUR","customer":"ada@example.com","description":"Order #1042",` +
	`"metadata":{"order_id":"1042","channel":"web"},"client_ts":"2026-11-30T18:35:13.123Z"}`)

var paymentExclude = []string{"/client_ts"}

func paymentRequest() Request {
	return Request{
		Method: "POST", Route: "/payments", ContentType: "application/json",
		Header: http.Header{"Idempotency-Key": {"5f0c3f4e-1b7a-4d52-9a36-0c2b9f1d7e21"}, "Content-Type": {"application/json"}},
		Body:   paymentBody, Exclude: paymentExclude,
	}
}

func BenchmarkCanonicalJSON(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(paymentBody)))
	for b.Loop() {
		if _, err := CanonicalJSON(paymentBody, paymentExclude); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	r := paymentRequest()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Fingerprint(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseKey(b *testing.B) {
	h := http.Header{idemtype.DefaultKeyHeader: {"5f0c3f4e-1b7a-4d52-9a36-0c2b9f1d7e21"}}
	rule := KeyRule{Required: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseKey(h, rule); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCanonicalJSONAllocations guards against the canonical form going
// back to allocating per token: a typical body costs the returned slice
// (the bound leaves room for the pool being emptied by a collection).
func TestCanonicalJSONAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumented builds allocate more")
	}
	CanonicalJSON(paymentBody, paymentExclude) // fill the pool
	if n := testing.AllocsPerRun(100, func() { CanonicalJSON(paymentBody, paymentExclude) }); n > 5 {
		t.Errorf("CanonicalJSON of a typical body: %v allocations; it was 1 (150 before the single-pass scanner)", n)
	}
	r := paymentRequest()
	if n := testing.AllocsPerRun(100, func() { Fingerprint(r) }); n > 5 {
		t.Errorf("Fingerprint of a typical request: %v allocations; it was 1 (159 before)", n)
	}
}
