package idemapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestRefusalKeepsTheProtocolsHeaders: whatever the API's own format
// renders, a refusal keeps the problem's Retry-After and Link, gets the
// kind's status when the format sets none, and says whether a retry may get
// past it; with no format it is problem+json.
func TestRefusalKeepsTheProtocolsHeaders(t *testing.T) {
	inFlight := &idemtype.Error{Kind: idemtype.KindInFlight, RetryAfter: 1500 * time.Millisecond}
	plain := idemapi.Contract{PolicyURL: "https://example.test/policy", Headers: idemapi.Headers{ShouldRetry: "Should-Retry"}}
	r := plain.Refusal(inFlight)
	if r.Status != 409 || r.Header.Get("Content-Type") != idemtype.ProblemContentType || r.Header.Get("Retry-After") != "2" ||
		!strings.Contains(r.Header.Get("Link"), "example.test/policy") || r.Header.Get("Should-Retry") != "true" {
		t.Errorf("problem+json: %d %v", r.Status, r.Header)
	}
	own := plain
	own.Refusals = func(e *idemtype.Error, problem *idemtype.Response) *idemtype.Response {
		return &idemtype.Response{Body: []byte(`{"error":"` + string(e.Kind) + `"}`)}
	}
	r = own.Refusal(inFlight)
	if r.Status != 409 || r.Header.Get("Retry-After") != "2" || r.Header.Get("Link") == "" || r.Header.Get("Should-Retry") != "true" || string(r.Body) != `{"error":"in-flight"}` {
		t.Errorf("the API's own format: %d %v %s", r.Status, r.Header, r.Body)
	}
	json := idemapi.Contract{Refusals: idemapi.JSONRefusals(func(e *idemtype.Error) any { return map[string]string{"code": string(e.Kind)} },
		map[idemtype.ErrorKind]int{idemtype.KindMismatch: 400})}
	if r := json.Refusal(&idemtype.Error{Kind: idemtype.KindMismatch}); r.Status != 400 || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("JSONRefusals: %d %v", r.Status, r.Header)
	}
}

// TestRequestIDs: a request id is Stripe's shape, and a Headers' own maker
// makes them when it has one.
func TestRequestIDs(t *testing.T) {
	id := idemapi.NewRequestID()
	if len(id) != 18 || !strings.HasPrefix(id, "req_") || id == idemapi.NewRequestID() {
		t.Errorf("NewRequestID: %q", id)
	}
	h := idemapi.Headers{NewRequestID: func() string { return "mine" }}
	if h.NewID() != "mine" || !h.IsZero() || (idemapi.Headers{EchoKey: true}).IsZero() {
		t.Errorf("Headers: %q, zero %v", h.NewID(), h.IsZero())
	}
}
