package routers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	stripeapi "github.com/idemgen/idemgen/golden/stripe_preset/out"
	"github.com/idemgen/idemgen/golden/stripe_preset/out/stripeclient"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

// stripeCharges are golden/stripe_preset's charge phases: a charge per
// execution, numbered; the authorization waits on hold when amount is 13.
type stripeCharges struct {
	n       atomic.Int32
	entered chan struct{}
	hold    chan struct{}
}

func (c *stripeCharges) Prepare(context.Context, pgx.Tx, stripeapi.PostChargesRequestObject, *stripeapi.PostChargesState) error {
	return nil
}

func (c *stripeCharges) Authorize(_ context.Context, _ string, r stripeapi.PostChargesRequestObject, _ *stripeapi.PostChargesState) error {
	if r.Body.Amount == 13 {
		close(c.entered)
		<-c.hold
	}
	return nil
}

func (c *stripeCharges) Finish(_ context.Context, _ pgx.Tx, r stripeapi.PostChargesRequestObject, _ *stripeapi.PostChargesState) (stripeapi.PostChargesResponseObject, error) {
	id := "ch_" + string(rune('a'+c.n.Add(1)))
	return stripeapi.PostCharges200JSONResponse{Id: id, Object: stripeapi.ChargeObjectCharge, Amount: r.Body.Amount, Currency: r.Body.Currency,
		Status: stripeapi.Succeeded, Paid: true}, nil
}

type stripeCustomers struct{}

func (stripeCustomers) Execute(context.Context, pgx.Tx, stripeapi.PostCustomersRequestObject, *stripeapi.PostCustomersState) (stripeapi.PostCustomersResponseObject, error) {
	return stripeapi.PostCustomers200JSONResponse{Id: "cus_1", Object: stripeapi.CustomerObjectCustomer}, nil
}

// TestStripePresetThroughTheGeneratedClient: golden/stripe_preset's
// service, on the engine its Contract configures, read by the client
// generated from its enriched spec: refusals arrive as Stripe's error
// object in typed fields, with Stripe's types, codes and statuses; every
// answer has a request id and the key; keys are raw.
func TestStripePresetThroughTheGeneratedClient(t *testing.T) {
	env := idemtest.New(t, idem.Options{Contract: stripeapi.Contract()})
	charges := &stripeCharges{entered: make(chan struct{}), hold: make(chan struct{})}
	h, err := stripeapi.Register(http.NewServeMux(), nil, stripeapi.Phases{PostCharges: charges, PostCustomers: stripeCustomers{}},
		&idemstd.Runtime{Engine: env.Engine, Principal: func(r *http.Request) (string, error) {
			return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client, err := stripeclient.NewIdempotentClient(srv.URL, idemclient.Policy{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	auth := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer sk_test_1")
		return nil
	}
	charge := func(key string, amount int64, editors ...stripeclient.RequestEditorFn) *stripeclient.PostChargesResponse {
		t.Helper()
		resp, _, err := client.PostChargesWithFormdataBody(ctx, key, stripeclient.PostChargesFormdataRequestBody{Amount: amount, Currency: "usd"}, append(editors, auth)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.HTTPResponse.Header.Get("Request-Id"), "req_") || resp.HTTPResponse.Header.Get("Idempotency-Key") != key {
			t.Errorf("key %q: headers %v; want a Request-Id and the key", key, resp.HTTPResponse.Header)
		}
		return resp
	}
	refused := func(what string, resp *stripeclient.PostChargesResponse, status int, typ, code string) {
		t.Helper()
		var e *stripeclient.IdempotencyStripeError
		switch resp.StatusCode() {
		case 400:
			e = resp.JSON400
		case 429:
			e = resp.JSON429
		}
		if resp.StatusCode() != status || e == nil || e.Error.Type != typ || e.Error.Message == "" || (code != "") != (e.Error.Code != nil) || e.Error.Code != nil && *e.Error.Code != code {
			t.Errorf("%s: %d %s; want %d, type %s, code %q, a message", what, resp.StatusCode(), resp.Body, status, typ, code)
		}
	}

	first := charge("order 42", 100)
	if first.JSON200 == nil {
		t.Fatalf("the charge: %d %s", first.StatusCode(), first.Body)
	}
	refused("a reused key", charge("order 42", 200), 400, "idempotency_error", "")
	quoted, bare := charge(`"dup-7"`, 100), charge("dup-7", 100)
	if quoted.JSON200 == nil || bare.JSON200 == nil || quoted.JSON200.Id == bare.JSON200.Id {
		t.Errorf(`"dup-7" and dup-7: %s and %s; want two charges`, quoted.Body, bare.Body)
	}

	done, done2 := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		charge("slow", 13)
	}()
	<-charges.entered
	busy := charge("slow", 13, idemclient.PreferWait(0))
	close(charges.hold)
	<-done
	refused("a key in use", busy, 429, "idempotency_error", "lock_timeout")
	if h := busy.HTTPResponse.Header; h.Get("Retry-After") == "" || h.Get("Stripe-Should-Retry") != "true" {
		t.Errorf("the 429's headers %v; want Retry-After and Stripe-Should-Retry: true", h)
	}
	replay := charge("slow", 13)
	if replay.JSON200 == nil || replay.HTTPResponse.Header.Get("Original-Request") == "" {
		t.Errorf("the replay: %d %v; want the charge, naming its original request", replay.StatusCode(), replay.HTTPResponse.Header)
	}

	// With its retries on, the client that would not wait comes back after
	// the 429's Retry-After and gets the charge: one charge for the key.
	retrying, err := stripeclient.NewIdempotentClient(srv.URL, idemclient.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	charges.entered, charges.hold = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done2)
		charge("slow-2", 13)
	}()
	<-charges.entered
	before := charges.n.Load()
	go func() {
		<-time.After(200 * time.Millisecond)
		close(charges.hold)
	}()
	resp, res, err := retrying.PostChargesWithFormdataBody(ctx, "slow-2", stripeclient.PostChargesFormdataRequestBody{Amount: 13, Currency: "usd"}, auth, idemclient.PreferWait(0))
	<-done2
	if err != nil || resp.JSON200 == nil || res.Attempts < 2 || !res.Replayed {
		t.Errorf("the retrying client: %v, %d, %+v; want the charge, replayed after a 429 and a retry", err, resp.StatusCode(), res)
	}
	if n := charges.n.Load(); n != before+1 {
		t.Errorf("%d charges made for slow-2; want 1", n-before)
	}
}
