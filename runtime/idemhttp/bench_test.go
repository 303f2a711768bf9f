package idemhttp

import (
	"net/http"
	"testing"
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
	h := http.Header{HeaderName: {"5f0c3f4e-1b7a-4d52-9a36-0c2b9f1d7e21"}}
	rule := KeyRule{Required: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseKey(h, rule); err != nil {
			b.Fatal(err)
		}
	}
}
