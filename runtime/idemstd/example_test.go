package idemstd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/exampledb"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Example is what the generated glue does for one operation on net/http,
// written by hand: the middleware on the route parses the key, scopes it
// to the caller and fingerprints the body; the handler runs its phases
// through Execute and writes the response it returns, fresh or replayed.
func Example() {
	ctx := context.Background()
	pool, done := exampledb.Pool("idemgen", "shop") // your application's pool
	defer done()
	if _, err := idemmigrate.New(pool, "idemgen").Up(ctx); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA shop; CREATE TABLE shop.items (id bigserial PRIMARY KEY, name text)`); err != nil {
		panic(err)
	}
	eng, err := idem.New(pool, idem.Options{Schema: "idemgen"})
	if err != nil {
		panic(err)
	}

	rt := &idemstd.Runtime{Engine: eng, Principal: func(r *http.Request) (string, error) {
		return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), nil
	}}
	spec := &idemstd.Spec{
		Operation: &idem.Operation{ID: "createItem"},
		Key:       idemhttp.KeyRule{Required: true},              // Idempotency-Key, required
		Scope:     idemtype.Scope{Kind: idemtype.ScopePrincipal}, // one key space per caller
		Route:     "/items",
	}
	type state struct{ ID int64 }
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Name string `json:"name"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		payload, _ := json.Marshal(body)
		resp, err := idemstd.Execute(r.Context(), eng, payload, []idem.Phase[state]{
			{Name: "insert", Local: func(ctx context.Context, tx pgx.Tx, s *state) error {
				return tx.QueryRow(ctx, `INSERT INTO shop.items (name) VALUES ($1) RETURNING id`, body.Name).Scan(&s.ID)
			}},
			{Name: "respond", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
				return idemstd.Render(func(w http.ResponseWriter) error {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					return json.NewEncoder(w).Encode(map[string]any{"id": s.ID, "name": body.Name})
				})
			}},
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /items", idemstd.Middleware(rt, spec)(create))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/items", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer acct_ada")
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		fmt.Printf("%d replayed=%q %s\n", res.StatusCode, res.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(out)))
	}
	post("k-1", `{"name":"lamp"}`)
	post("k-1", `{"name":"lamp"}`)
	post("k-1", `{"name":"desk"}`)
	// Output:
	// 201 replayed="" {"id":1,"name":"lamp"}
	// 201 replayed="true" {"id":1,"name":"lamp"}
	// 422 replayed="" {"type":"urn:idemgen:problem:key-reused","title":"Idempotency-Key was used with a different request","status":422,"detail":"this key was first used with a different request"}
}
