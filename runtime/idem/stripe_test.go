package idem_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestStripeRefusals: idem.Stripe renders every refusal kind as Stripe's
// error object, with a type, a message in words, and the status Stripe
// answers it with; StripeWith lets the config's refusal-statuses replace
// a status, so that the service answers what its enriched spec documents;
// a caller's request id maker survives the preset.
func TestStripeRefusals(t *testing.T) {
	opts := idem.Stripe(idem.Options{})
	for _, kind := range idemtype.ErrorKinds() {
		resp := opts.Refusals(&idem.Error{Kind: kind}, idem.ProblemResponse(&idem.Error{Kind: kind}, ""))
		var body idem.StripeError
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		want := kind.Status()
		if kind == idemtype.KindMismatch {
			want = 400
		}
		if resp.Status != want || body.Error.Type == "" || body.Error.Message == "" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s; want %d, a type and a message", kind, resp.Status, resp.Body, want)
		}
	}
	inFlight := &idem.Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second}
	if r := opts.Refusals(inFlight, nil); r.Status != 409 || !json.Valid(r.Body) {
		t.Errorf("in flight: %d", r.Status)
	}
	opts = idem.StripeWith(idem.Options{Headers: idem.Headers{NewRequestID: func() string { return "req_mine" }}},
		map[idemtype.ErrorKind]int{idemtype.KindInFlight: 429})
	if r := opts.Refusals(inFlight, nil); r.Status != 429 {
		t.Errorf("in flight with refusal-statuses {in-flight: 429}: %d; want 429", r.Status)
	}
	if r := opts.Refusals(&idem.Error{Kind: idemtype.KindMismatch}, nil); r.Status != 400 {
		t.Errorf("a reused key: %d; want Stripe's 400 still", r.Status)
	}
	if id := opts.Headers.NewID(); id != "req_mine" || opts.Headers.RequestID != "Request-Id" {
		t.Errorf("headers %+v make %q; want Stripe's, with the caller's id maker", opts.Headers, id)
	}
}
