package payclient_test

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/payclient"
	"github.com/idemgen/idemgen/runtime/idemclient"
)

// createOrder records the payment intent, with its key, in the transaction
// that creates the order: the key exists before any request is sent.
func createOrder(ctx context.Context, tx pgx.Tx, orderID, amount int64, customer string) error {
	_, err := tx.Exec(ctx, `INSERT INTO payment_intents (order_id, idem_key, amount, customer) VALUES ($1, $2, $3, $4)`,
		orderID, idemclient.NewKey(), amount, customer)
	return err
}

// sendOpenIntents sends every open intent under its stored key and records
// the answers; after a crash, the next pass sends the same keys again.
func sendOpenIntents(ctx context.Context, pool *pgxpool.Pool, c *payclient.IdempotentClient) error {
	rows, err := pool.Query(ctx, `SELECT id, idem_key, amount, customer FROM payment_intents
		WHERE state = 'open' AND created_at > now() - interval '23 hours' ORDER BY id LIMIT 100`)
	if err != nil {
		return err
	}
	type intent struct {
		id, amount    int64
		key, customer string
	}
	intents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (intent, error) {
		var in intent
		return in, r.Scan(&in.id, &in.key, &in.amount, &in.customer)
	})
	if err != nil {
		return err
	}
	for _, in := range intents {
		resp, _, err := c.CreatePayment(ctx, in.key, payclient.NewPayment{Amount: in.amount, Currency: "EUR", Customer: in.customer})
		var state string
		switch {
		case err != nil:
			continue // no answer yet: the intent stays open, with its key
		case resp.StatusCode() == 201 || resp.StatusCode() == 402:
			state = "answered"
		case resp.StatusCode() == 409 || resp.StatusCode() == 429 || resp.StatusCode() >= 500:
			continue // not answered yet
		default:
			state = "stuck" // 400, 422...: retrying cannot help
		}
		if _, err := pool.Exec(ctx, `UPDATE payment_intents SET state = $2, status = $3, answer = $4 WHERE id = $1`,
			in.id, state, resp.StatusCode(), resp.Body); err != nil {
			return err
		}
	}
	return nil
}

// The caller's side of docs/client.md: each intent's key is stored with the
// intent and every send of the intent uses it. (Compiled, not run: it needs
// the caller's database.)
func ExampleIdempotentClient_CreatePayment() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres:///shop")
	if err != nil {
		panic(err)
	}
	c, err := payclient.NewIdempotentClient("http://127.0.0.1:8080", idemclient.Policy{},
		payclient.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}),
		payclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer acct_ada")
			return nil
		}))
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return createOrder(ctx, tx, 42, 1000, "ada@example.com") })
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sendOpenIntents(ctx, pool, c); err != nil {
		panic(err)
	}
}
