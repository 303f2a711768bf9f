package idemecho_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// BenchmarkHandler compares, on one database in one run, a plain echo
// handler that inserts one row with the same handler behind the engine:
// with a new key each request (claim + one phase that inserts and stores
// the response), the same with the claim committed asynchronously, and
// replays of one key. Run with `make bench` (durable PostgreSQL).
func BenchmarkHandler(b *testing.B) {
	pool, schema := dbtest.Pool(b)
	ctx := context.Background()
	if _, err := idem.Migrate(ctx, pool, schema); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE bench (id bigserial PRIMARY KEY, amount int)`); err != nil {
		b.Fatal(err)
	}
	e := echo.New()
	e.POST("/plain", func(c echo.Context) error {
		var id int64
		if err := pool.QueryRow(c.Request().Context(), `INSERT INTO bench (amount) VALUES (100) RETURNING id`).Scan(&id); err != nil {
			return err
		}
		return c.JSON(201, map[string]int64{"id": id})
	})
	for _, async := range []bool{false, true} {
		eng, err := idem.New(pool, idem.Options{Schema: schema, AsyncClaimCommit: async})
		if err != nil {
			b.Fatal(err)
		}
		rt := &idemecho.Runtime{Engine: eng, Principal: func(echo.Context) (string, error) { return "acct", nil }}
		spec := &idemecho.Spec{Operation: &idem.Operation{ID: "bench", Policy: idem.Policy{Lease: 30 * time.Second}},
			Key: idemhttp.KeyRule{Required: true}, Scope: "principal", Route: "/idem"}
		e.POST(fmt.Sprintf("/idem/%t", async), func(c echo.Context) error {
			resp, err := idemecho.Execute(c.Request().Context(), rt, nil, []idem.Phase[struct{}]{{Name: "insert",
				Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
					var id int64
					if err := tx.QueryRow(ctx, `INSERT INTO bench (amount) VALUES (100) RETURNING id`).Scan(&id); err != nil {
						return nil, err
					}
					return idemecho.Render(func(w http.ResponseWriter) error {
						w.Header().Set("Content-Type", "application/json")
						w.WriteHeader(201)
						_, err := fmt.Fprintf(w, `{"id":%d}`, id)
						return err
					})
				}}})
			if err != nil {
				return err
			}
			return idemecho.Writer(c.Request().Context(), resp)(c.Response())
		}, idemecho.Middleware(rt, spec))
	}
	do := func(b *testing.B, path, key string) {
		req := httptest.NewRequest("POST", path, strings.NewReader(`{"amount":100}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != 201 {
			b.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	run := 0
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			do(b, "/plain", "")
		}
	})
	b.Run("new-key", func(b *testing.B) {
		run++
		i := 0
		for b.Loop() {
			i++
			do(b, "/idem/false", fmt.Sprintf("k-%d-%d", run, i))
		}
	})
	b.Run("new-key-async-claim", func(b *testing.B) {
		run++
		i := 0
		for b.Loop() {
			i++
			do(b, "/idem/true", fmt.Sprintf("a-%d-%d", run, i))
		}
	})
	b.Run("replay", func(b *testing.B) {
		do(b, "/idem/false", "replayed")
		for b.Loop() {
			do(b, "/idem/false", "replayed")
		}
	})
}
