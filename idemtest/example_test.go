package idemtest_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// A phase test: the service's table beside the engine's, one request run
// twice with the same key. The second gets the stored response back and
// inserts nothing.
func Example() {
	// Only so that the example runs: in a test, t is the test's *testing.T.
	// (A zero testing.T runs no cleanups; Main drops the database anyway.)
	t := &testing.T{}
	ctx := context.Background()
	env := idemtest.New(t, idem.Options{})
	if _, err := env.Pool.Exec(ctx, `CREATE TABLE payments (id bigserial PRIMARY KEY, cents bigint)`); err != nil {
		panic(err)
	}

	op := &idem.Operation{ID: "createPayment"}
	body := []byte(`{"cents":500}`)
	fp := sha256.Sum256(body)
	req := idem.KeyedRequest{Scope: "acct_1", Key: "k-1", Fingerprint: fp[:]}
	phases := []idem.Phase[struct{}]{{Name: "insert",
		Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO payments (cents) VALUES (500) RETURNING id`).Scan(&id); err != nil {
				return nil, err
			}
			return &idem.Response{Status: http.StatusCreated, Body: fmt.Appendf(nil, `{"id":%d}`, id)}, nil
		}}}
	for range 2 {
		out, err := idem.Run(ctx, env.Engine, op, req, phases)
		if err != nil {
			panic(err)
		}
		fmt.Println(out.Response.Status, string(out.Response.Body), "replayed:", out.Replayed)
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("payments:", n)
	// Output:
	// 201 {"id":1} replayed: false
	// 201 {"id":1} replayed: true
	// payments: 1
}
