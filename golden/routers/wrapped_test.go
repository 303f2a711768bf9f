package routers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	wrapped "github.com/idemgen/idemgen/golden/wrapped_handler/out"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

// customer is the service's authentication: one customer here.
func customer(*http.Request) (string, error) { return "acct_1", nil }

var errOversold = errors.New("more lamps ordered than there were")

// newOrderService makes the wrapped service's tables in env's schema, and
// the service with a card network of its own.
func newOrderService(t *testing.T, pool *pgxpool.Pool) (*orderService, *cardNetwork) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), wrappedSchema); err != nil {
		t.Fatal(err)
	}
	network := &cardNetwork{byKey: map[string]string{}}
	srv := httptest.NewServer(network)
	t.Cleanup(srv.Close)
	return &orderService{pool: pool, q: NewQueries(pool), cards: &cardClient{url: srv.URL}}, network
}

type exchange struct {
	status   int
	body     string
	replayed bool
}

func send(t *testing.T, url, path, key, body string) exchange {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return exchange{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"}
}

// TestWrappedHandlersOverChi: the existing handlers, served by the glue on
// chi, answer as before and replay every answer to a retry, whatever its
// status: the order's 201 and the stock-out 409, the payment's 201 with
// one charge, its 404 and its 409.
func TestWrappedHandlersOverChi(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	svc, network := newOrderService(t, env.Pool)
	h, err := wrapped.Register(chi.NewRouter(), svc, wrapped.Phases{}, &idemstd.Runtime{Engine: env.Engine, Principal: customer})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	twice := func(path, key, body string, status int) exchange {
		t.Helper()
		first := send(t, srv.URL, path, key, body)
		again := send(t, srv.URL, path, key, body)
		if first.status != status || first.replayed || !again.replayed || again.status != first.status || again.body != first.body {
			t.Fatalf("%s under %s: first %+v, retry %+v; want %d, then the same bytes replayed", path, key, first, again, status)
		}
		return first
	}
	order := twice("/orders", "o-1", `{"item":"lamp","quantity":2}`, 201)
	if !strings.Contains(order.body, `"id":1`) {
		t.Fatalf("order: %s", order.body)
	}
	twice("/orders", "o-2", `{"item":"lamp","quantity":2}`, 409)
	twice("/orders/1/payments", "p-1", `{"card":"4242"}`, 201)
	twice("/orders/9/payments", "p-9", `{"card":"4242"}`, 404)
	twice("/orders/1/payments", "p-2", `{"card":"4242"}`, 409)
	if charges, _ := network.counts(); charges != 1 {
		t.Errorf("%d charges, want 1", charges)
	}
	var n, left int
	if err := env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM orders), (SELECT n FROM stock)`).Scan(&n, &left); err != nil || n != 1 || left != 1 {
		t.Errorf("%d orders and %d lamps left (%v); want 1 and 1", n, left, err)
	}
}

// TestWrappedHandlersAnswerAsThePlainService: the same requests to the
// service served by oapi-codegen's own strict handler, without idemgen,
// and through the glue give the same answers and leave the same rows.
func TestWrappedHandlersAnswerAsThePlainService(t *testing.T) {
	requests := []struct{ path, body string }{
		{"/orders", `{"item":"lamp","quantity":2}`},
		{"/orders", `{"item":"lamp","quantity":2}`},
		{"/orders/1/payments", `{"card":"4242"}`},
		{"/orders/1/payments", `{"card":"4242"}`},
		{"/orders/7/payments", `{"card":"4242"}`},
	}
	run := func(idempotent bool) ([]exchange, string) {
		env := idemtest.New(t, idem.Options{})
		svc, _ := newOrderService(t, env.Pool)
		var h http.Handler = wrapped.HandlerFromMux(wrapped.NewStrictHandler(svc, nil), chi.NewRouter())
		if idempotent {
			var err error
			if h, err = wrapped.Register(chi.NewRouter(), svc, wrapped.Phases{}, &idemstd.Runtime{Engine: env.Engine, Principal: customer}); err != nil {
				t.Fatal(err)
			}
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		var got []exchange
		for i, r := range requests {
			got = append(got, send(t, srv.URL, r.path, "k-"+string(rune('a'+i)), r.body))
		}
		var rows string
		if err := env.Pool.QueryRow(context.Background(), `SELECT (SELECT string_agg(format('%s %s %s %s', id, item, quantity, status), ';' ORDER BY id) FROM orders)
			|| ' / ' || (SELECT string_agg(format('%s %s %s', order_id, charge, amount), ';') FROM payments) || ' / ' || (SELECT n FROM stock)`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return got, rows
	}
	plain, plainRows := run(false)
	viaIdem, idemRows := run(true)
	for i := range requests {
		if plain[i].status != viaIdem[i].status || plain[i].body != viaIdem[i].body {
			t.Errorf("request %d: plain %+v, through idemgen %+v", i, plain[i], viaIdem[i])
		}
	}
	if plainRows != idemRows {
		t.Errorf("rows: plain %q, through idemgen %q", plainRows, idemRows)
	}
}

// TestWrappedHandlersAreExactlyOnce: idemtest.Check runs both handlers, as
// the glue binds them, through crashes inside and after each step and
// inside the final transaction, a takeover during the card call,
// concurrent duplicates, and (the order) concurrent orders under other
// keys that must not sell more than the stock.
func TestWrappedHandlersAreExactlyOnce(t *testing.T) {
	network := &cardNetwork{byKey: map[string]string{}}
	cards := httptest.NewServer(network)
	defer cards.Close()
	var pool *pgxpool.Pool
	service := func() *orderService {
		return &orderService{pool: pool, q: NewQueries(pool), cards: &cardClient{url: cards.URL}}
	}
	setup := func(withOrder bool) func(context.Context, *pgxpool.Pool) error {
		return func(ctx context.Context, p *pgxpool.Pool) error {
			pool = p
			if _, err := p.Exec(ctx, wrappedSchema); err != nil {
				return err
			}
			if withOrder {
				_, err := p.Exec(ctx, `INSERT INTO orders (item, quantity) VALUES ('lamp', 1)`)
				return err
			}
			return nil
		}
	}
	t.Run("createOrder", func(t *testing.T) {
		idemtest.Check(t, idemtest.Case[struct{}]{
			Operation: wrapped.CreateOrderOperation(),
			Setup:     setup(false),
			Handler: func() idem.Handler {
				return wrapped.CreateOrderHandler(service(), wrapped.CreateOrderRequestObject{Body: &wrapped.NewOrder{Item: "lamp", Quantity: 2}})
			},
			Invariant: func(ctx context.Context, tx pgx.Tx) error {
				var oversold bool
				if err := tx.QueryRow(ctx, `SELECT (SELECT coalesce(sum(quantity), 0) FROM orders) > 3`).Scan(&oversold); err != nil || !oversold {
					return err
				}
				return errOversold
			},
		})
	})
	t.Run("createPayment", func(t *testing.T) {
		idemtest.Check(t, idemtest.Case[struct{}]{
			Operation: wrapped.CreatePaymentOperation(),
			Setup:     setup(true),
			Handler: func() idem.Handler {
				return wrapped.CreatePaymentHandler(service(), wrapped.CreatePaymentRequestObject{Id: 1, Body: &wrapped.CreatePaymentJSONRequestBody{Card: "4242"}})
			},
		})
	})
}

// TestWrappedPaymentResumesWithoutASecondCall: the execution dies between
// the card network's answer and the final write; the retry resumes from
// the recorded charge, without calling the network again, and answers the
// payment.
func TestWrappedPaymentResumesWithoutASecondCall(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	svc, network := newOrderService(t, env.Pool)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `INSERT INTO orders (item, quantity) VALUES ('lamp', 1)`); err != nil {
		t.Fatal(err)
	}
	req := idem.KeyedRequest{Key: "pay-1", Fingerprint: []byte("pay-1")}
	request := wrapped.CreatePaymentRequestObject{Id: 1, Body: &wrapped.CreatePaymentJSONRequestBody{Card: "4242"}}
	svc.cards.afterCharge = runtime.Goexit
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.RunHandler(ctx, env.Engine, wrapped.CreatePaymentOperation(), req, wrapped.CreatePaymentHandler(svc, request))
	}()
	<-done
	svc.cards.afterCharge = nil
	if _, err := env.Pool.Exec(ctx, `UPDATE records SET lease_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	out, err := idem.RunHandler(ctx, env.Engine, wrapped.CreatePaymentOperation(), req, wrapped.CreatePaymentHandler(svc, request))
	if err != nil || out.Response.Status != 201 || !out.Resumed {
		t.Fatalf("the retry: %+v, %v; want a resumed 201", out, err)
	}
	if charges, calls := network.counts(); charges != 1 || calls != 1 {
		t.Errorf("%d charges in %d calls, want 1 in 1", charges, calls)
	}
}
