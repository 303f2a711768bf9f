package idem_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/exampledb"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// Example runs one payment through the engine under one key, as a
// generated handler does: the first request executes the phases (a local
// insert, a charge at a foreign system, the final answer), a retry replays
// the stored answer without running them, and the key reused for another
// request is refused.
func Example() {
	ctx := context.Background()
	pool, done := exampledb.Pool("idemgen", "shop") // your application's pool
	defer done()

	// Once, at deployment: the engine's tables, and the application's.
	if _, err := idemmigrate.New(pool, "idemgen").Up(ctx); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA shop;
		CREATE TABLE shop.payments (id bigserial PRIMARY KEY, amount int NOT NULL, charge text)`); err != nil {
		panic(err)
	}
	eng, err := idem.New(pool, idem.Options{Schema: "idemgen"})
	if err != nil {
		panic(err)
	}
	op := &idem.Operation{ID: "createPayment"}

	// The phases of createPayment. The state is stored at each recovery
	// point, so an execution taken over after a crash resumes from it.
	type state struct {
		PaymentID int64
		ChargeID  string
	}
	charges := 0
	phases := []idem.Phase[state]{
		{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, s *state) error {
			return tx.QueryRow(ctx, `INSERT INTO shop.payments (amount) VALUES (1000) RETURNING id`).Scan(&s.PaymentID)
		}},
		{Name: "charge", Foreign: func(ctx context.Context, key string, s *state) error {
			// key is derived from the request's: send it to the card
			// network as its idempotency key, so a resumed charge is not
			// made twice.
			charges++
			s.ChargeID = "ch_1"
			return nil
		}},
		{Name: "respond", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
			if _, err := tx.Exec(ctx, `UPDATE shop.payments SET charge = $1 WHERE id = $2`, s.ChargeID, s.PaymentID); err != nil {
				return nil, err
			}
			return &idem.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
				Body: fmt.Appendf(nil, `{"id":%d,"charge":%q}`, s.PaymentID, s.ChargeID)}, nil
		}},
	}

	// A request is its scope (here the account), its key and the
	// fingerprint of its canonical body (runtime/idemhttp computes it).
	request := func(body string) idem.KeyedRequest {
		sum := sha256.Sum256([]byte(body))
		return idem.KeyedRequest{Scope: "acct_ada", Key: "order-42", Fingerprint: sum[:]}
	}
	for range 2 {
		out, err := idem.Run(ctx, eng, op, request(`{"amount":1000}`), phases)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d %s replayed=%t\n", out.Response.Status, out.Response.Body, out.Replayed)
	}
	_, err = idem.Run(ctx, eng, op, request(`{"amount":2000}`), phases)
	var refusal *idem.Error
	if errors.As(err, &refusal) {
		fmt.Println("another request under the same key:", refusal.Kind)
	}
	fmt.Println("card charges:", charges)
	// Output:
	// 201 {"id":1,"charge":"ch_1"} replayed=false
	// 201 {"id":1,"charge":"ch_1"} replayed=true
	// another request under the same key: key-reused
	// card charges: 1
}
