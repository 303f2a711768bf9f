package idempreset_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idempreset"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestStripeRefusals: Stripe renders every refusal kind as Stripe's
// error object, with a type, a message in words, and the status Stripe
// answers it with: what a retry with the same key gets past (a key in
// use, the store unavailable, a failed execution a retry resumes) is 429
// lock_timeout, the one answer stripe-go retries, and the rest keep theirs
// (a failure for an operator stays 500); StripeWith lets the config's
// refusal-statuses replace a status, so that the service answers what its
// enriched spec documents; a caller's request id maker, set on the preset, makes the ids.
func TestStripeRefusals(t *testing.T) {
	opts := idempreset.Stripe()
	for _, kind := range idemtype.ErrorKinds() {
		resp := opts.Refusals(&idemtype.Error{Kind: kind}, idemapi.Problem(&idemtype.Error{Kind: kind}, ""))
		var body idempreset.StripeError
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		want := kind.Status()
		switch kind {
		case idemtype.KindMismatch:
			want = 400
		case idemtype.KindInFlight, idemtype.KindUnavailable:
			want = 429
		}
		if resp.Status != want || body.Error.Type == "" || body.Error.Message == "" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s; want %d, a type and a message", kind, resp.Status, resp.Body, want)
		}
	}
	for _, c := range []struct {
		err    *idemtype.Error
		status int
		typ    string
		code   string
	}{
		{&idemtype.Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second}, 429, idempreset.StripeIdempotencyError, idempreset.StripeLockTimeout},
		{&idemtype.Error{Kind: idemtype.KindFailed, RetryAfter: time.Second}, 429, idempreset.StripeAPIError, idempreset.StripeLockTimeout},
		{&idemtype.Error{Kind: idemtype.KindFailed}, 500, idempreset.StripeAPIError, ""},
	} {
		r := opts.Refusals(c.err, idemapi.Problem(c.err, ""))
		var body idempreset.StripeError
		if err := json.Unmarshal(r.Body, &body); err != nil || r.Status != c.status || body.Error.Type != c.typ || body.Error.Code != c.code {
			t.Errorf("%s (retry after %v): %d %s; want %d %s %q", c.err.Kind, c.err.RetryAfter, r.Status, r.Body, c.status, c.typ, c.code)
		}
	}
	inFlight := &idemtype.Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second}
	opts = idempreset.StripeWith(map[idemtype.ErrorKind]int{idemtype.KindInFlight: 409})
	opts.Headers.NewRequestID = func() string { return "req_mine" }
	if r := opts.Refusals(inFlight, nil); r.Status != 409 {
		t.Errorf("in flight with refusal-statuses {in-flight: 409}: %d; want 409", r.Status)
	}
	if r := opts.Refusals(&idemtype.Error{Kind: idemtype.KindMismatch}, nil); r.Status != 400 {
		t.Errorf("a reused key: %d; want Stripe's 400 still", r.Status)
	}
	if id := opts.Headers.NewID(); id != "req_mine" || opts.Headers.RequestID != "Request-Id" {
		t.Errorf("headers %+v make %q; want Stripe's, with the caller's id maker", opts.Headers, id)
	}
}
