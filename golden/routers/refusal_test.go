package routers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	refapi "github.com/idemgen/idemgen/golden/refusal_schema/out"
	"github.com/idemgen/idemgen/golden/refusal_schema/out/chargeclient"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

type charge struct{ entered, hold chan struct{} }

func (c *charge) Execute(ctx context.Context, _ pgx.Tx, r refapi.PostChargesRequestObject, _ *refapi.PostChargesState) (refapi.PostChargesResponseObject, error) {
	if r.Body.Currency == "HOLD" {
		close(c.entered)
		<-c.hold
	}
	return refapi.PostCharges200JSONResponse{Id: "ch_1", Amount: r.Body.Amount}, nil
}

// TestRefusalsInTheAPIsFormat: golden/refusal_schema's service renders the
// idempotency layer's refusals as its own error object (Stripe's shape),
// with the statuses its config gives (a reused key is 400), through
// idemapi.JSONRefusals; the client generated from the enriched spec reads
// each one as that object, in a typed field.
func TestRefusalsInTheAPIsFormat(t *testing.T) {
	// The claim commits before the phase, so that a duplicate finds it in
	// flight (in the default mode it would wait for the first's commit).
	env := idemtest.New(t, idem.Options{Claim: idem.ClaimSeparate, Contract: idemapi.Contract{Refusals: idemapi.JSONRefusals(func(e *idem.Error) any {
		return map[string]any{"error": map[string]any{"type": "idempotency_error", "code": string(e.Kind), "message": e.Detail}}
	}, refapi.RefusalStatuses)}})
	svc := &charge{entered: make(chan struct{}), hold: make(chan struct{})}
	h, err := refapi.Register(http.NewServeMux(), nil, refapi.Phases{PostCharges: svc}, &idemstd.Runtime{Engine: env.Engine, MaxBodyBytes: 256,
		Principal: func(r *http.Request) (string, error) {
			return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	// No retries: each answer as the server gives it.
	client, err := chargeclient.NewIdempotentClient(srv.URL, idemclient.Policy{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	auth := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer acct_1")
		return nil
	}
	refused := func(what string, resp *chargeclient.PostChargesResponse, status int, code string) {
		t.Helper()
		var e *chargeclient.Error
		switch resp.StatusCode() {
		case 400:
			e = resp.JSON400
		case 401:
			e = resp.JSON401
		case 409:
			e = resp.JSON409
		case 413:
			e = resp.JSON413
		case 415:
			e = resp.JSON415
		}
		if resp.StatusCode() != status || e == nil || e.Error.Type != "idempotency_error" || e.Error.Code == nil || *e.Error.Code != code {
			t.Errorf("%s: %d %s; want %d with the API's error object, code %s", what, resp.StatusCode(), resp.Body, status, code)
		}
	}
	body := chargeclient.PostChargesJSONRequestBody{Amount: 100, Currency: "EUR"}
	if resp, _, err := client.PostCharges(ctx, "k1", body, auth); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("the charge: %v %v", err, resp)
	}
	resp, _, err := client.PostCharges(ctx, "k1", chargeclient.PostChargesJSONRequestBody{Amount: 200, Currency: "EUR"}, auth)
	if err != nil {
		t.Fatal(err)
	}
	refused("a reused key", resp, 400, "key-reused")
	if resp, err = client.Client.PostChargesWithResponse(ctx, body, auth); err == nil {
		refused("no key", resp, 400, "missing-key")
	}
	if resp, _, err = client.PostCharges(ctx, "k2", body); err == nil {
		refused("no principal", resp, 401, "missing-scope")
	}
	if resp, _, err = client.PostCharges(ctx, "k3", chargeclient.PostChargesJSONRequestBody{Amount: 1, Currency: strings.Repeat("X", 300)}, auth); err == nil {
		refused("a large body", resp, 413, "request-too-large")
	}
	if resp, _, err = client.PostChargesWithBody(ctx, "k4", "text/plain", strings.NewReader("amount=1"), auth); err == nil {
		refused("a text body", resp, 415, "unsupported-media-type")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		client.PostCharges(ctx, "k5", chargeclient.PostChargesJSONRequestBody{Amount: 1, Currency: "HOLD"}, auth)
	}()
	<-svc.entered
	// A duplicate that will not wait for the first (Prefer: wait=0).
	resp, _, err = client.PostCharges(ctx, "k5", chargeclient.PostChargesJSONRequestBody{Amount: 1, Currency: "HOLD"}, auth, idemclient.PreferWait(0))
	if err != nil {
		t.Fatal(err)
	}
	close(svc.hold)
	<-done
	refused("a duplicate in flight", resp, 409, "in-flight")
	if resp.HTTPResponse.Header.Get("Retry-After") == "" {
		t.Error("the 409 lost its Retry-After")
	}
}
