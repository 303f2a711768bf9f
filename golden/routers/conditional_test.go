package routers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	condapi "github.com/idemgen/idemgen/golden/conditional_client/out"
	"github.com/idemgen/idemgen/golden/conditional_client/out/orderclient"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

// orders is golden/conditional_client's service: PUT creates an order
// under the client's id unless one exists (If-None-Match: *), GET reads it.
type orders struct {
	mu     sync.Mutex
	byID   map[string]condapi.Order
	writes int
}

func (o *orders) PutOrder(_ context.Context, r condapi.PutOrderRequestObject) (condapi.PutOrderResponseObject, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.byID[r.Id]; ok {
		return condapi.PutOrder412Response{}, nil
	}
	o.writes++
	order := condapi.Order{Id: r.Id, Item: r.Body.Item, Quantity: r.Body.Quantity}
	o.byID[r.Id] = order
	return condapi.PutOrder201JSONResponse(order), nil
}

func (o *orders) GetOrder(_ context.Context, r condapi.GetOrderRequestObject) (condapi.GetOrderResponseObject, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	order, ok := o.byID[r.Id]
	if !ok {
		return condapi.GetOrder404Response{}, nil
	}
	return condapi.GetOrder200JSONResponse(order), nil
}

type note struct{}

func (note) Execute(context.Context, pgx.Tx, condapi.CreateNoteRequestObject, *condapi.CreateNoteState) (condapi.CreateNoteResponseObject, error) {
	return condapi.CreateNote201Response{}, nil
}

// TestConditionalCreateReadsBack: the generated client's conditional
// create, whose first answer is lost after the server created the order,
// gets 412 on its retry; it reads the order back, finds what it sent, and
// says the write is done. A 412 on a first attempt, or an order that
// differs, is not confirmed; the equality hook decides when set.
func TestConditionalCreateReadsBack(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	svc := &orders{byID: map[string]condapi.Order{}}
	h, err := condapi.Register(http.NewServeMux(), svc, condapi.Phases{CreateNote: note{}}, &idemstd.Runtime{Engine: env.Engine, Principal: func(*http.Request) (string, error) { return "me", nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	drop := &dropFirst{next: http.DefaultTransport}
	client, err := orderclient.NewIdempotentClient(srv.URL, idemclient.Policy{MinWait: time.Millisecond},
		orderclient.WithHTTPClient(&http.Client{Transport: drop}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	star := &orderclient.PutOrderParams{IfNoneMatch: "*"}
	book := orderclient.PutOrderJSONRequestBody{Item: "book", Quantity: 1}

	resp, res, err := client.PutOrder(ctx, "o-1", star, book)
	if err != nil || resp.StatusCode() != 412 || res.Attempts != 2 || !res.Confirmed || svc.writes != 1 {
		t.Fatalf("a lost 201, then 412: %v, %+v, %d writes; want the 412 confirmed by the read-back", err, res, svc.writes)
	}
	// The order was there before this call: its first answer is 412.
	resp, res, err = client.PutOrder(ctx, "o-1", star, book)
	if err != nil || resp.StatusCode() != 412 || res.Attempts != 1 || res.Confirmed {
		t.Fatalf("a 412 on the first attempt: %v, %+v; want it unconfirmed", err, res)
	}
	// Another client's order under the same id: a retry's 412, but the
	// order read back is not what was sent.
	svc.byID["o-2"] = condapi.Order{Id: "o-2", Item: "pen", Quantity: 3}
	drop.dropped = false
	resp, res, err = client.PutOrder(ctx, "o-2", star, book)
	if err != nil || resp.StatusCode() != 412 || res.Confirmed {
		t.Fatalf("someone else's order: %v, %+v; want it unconfirmed", err, res)
	}
	// The hook decides: here, the item alone.
	client.SameResource = func(op string, sent, current []byte) bool {
		return op == "putOrder" && idemclient.SameJSON([]byte(`{"item":"pen"}`), current)
	}
	drop.dropped = false
	if _, res, err = client.PutOrder(ctx, "o-2", star, book); err != nil || !res.Confirmed {
		t.Fatalf("with the hook: %v, %+v; want it confirmed", err, res)
	}
}
