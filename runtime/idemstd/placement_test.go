package idemstd_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestPlacementFromTheRequest: an operation placed by a path parameter, a
// header, a body member or the principal (through the runtime's mapping)
// keeps that value as its record's placement; a request that names none
// is refused 400 before anything is claimed.
func TestPlacementFromTheRequest(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	typ := dbtest.Placement()
	if typ == "" {
		typ = "text"
	}
	ctx := context.Background()
	if _, err := idemmigrate.New(env.Pool, env.Schema).DistributeBy(ctx, idemmigrate.DistributeOptions{PlacementType: typ}); err != nil {
		t.Fatal(err)
	}
	rt := &idemstd.Runtime{Engine: env.Engine,
		Principal: func(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil },
		Placement: func(principal string) (string, error) {
			return map[string]string{"sk_a": "100", "sk_b": "200"}[principal], nil
		}}
	type state struct{}
	for _, c := range []struct {
		placement    idemtype.Placement
		route, path  string
		header, body string
		want         string // the record's placement; "" for a 400
	}{
		{idemtype.Placement{Kind: idemtype.PlacementPath, Name: "account"}, "/accounts/{account}/charges", "/accounts/11/charges", "", "{}", "11"},
		{idemtype.Placement{Kind: idemtype.PlacementHeader, Name: "X-Account"}, "/charges", "/charges", "12", "{}", "12"},
		{idemtype.Placement{Kind: idemtype.PlacementBody, Name: "/account"}, "/charges", "/charges", "", `{"account":13}`, "13"},
		{idemtype.Placement{Kind: idemtype.PlacementPrincipal}, "/charges", "/charges", "", "{}", "200"},
		{idemtype.Placement{Kind: idemtype.PlacementHeader, Name: "X-Account"}, "/charges", "/charges", "", "{}", ""},
		{idemtype.Placement{Kind: idemtype.PlacementBody, Name: "/account"}, "/charges", "/charges", "", `{"other":1}`, ""},
	} {
		op := &idem.Operation{ID: "op-" + c.placement.String() + c.want}
		spec := &idemstd.Spec{Operation: op, Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal},
			Placement: c.placement, Route: c.route}
		ran := false
		h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			resp, err := idemstd.Execute(r.Context(), env.Engine, nil, []idem.Phase[state]{{Name: "only", Final: func(context.Context, pgx.Tx, *state) (*idem.Response, error) {
				return &idem.Response{Status: 201, Body: []byte(`{}`)}, nil
			}}})
			if err != nil {
				t.Error(err)
				return
			}
			idemstd.Writer(r.Context(), resp)(w)
		}))
		mux := http.NewServeMux()
		mux.Handle("POST "+c.route, h)
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Idempotency-Key", "k-"+c.want)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "sk_b")
		if c.header != "" {
			req.Header.Set("X-Account", c.header)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if c.want == "" {
			if rec.Code != 400 || ran {
				t.Errorf("%s without a placement: %d (handler ran %v); want 400 before the handler", c.placement, rec.Code, ran)
			}
			continue
		}
		var n int
		if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM records WHERE placement::text = $1`, c.want).Scan(&n); rec.Code != 201 || err != nil || n != 1 {
			t.Errorf("%s: %d, %d records placed at %s (%v); want 201 and 1", c.placement, rec.Code, n, c.want, err)
		}
	}
}
