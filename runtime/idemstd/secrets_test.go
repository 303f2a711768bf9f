package idemstd_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestCredentialScopeIsNotLogged: a principal that is a credential (a
// Stripe-style secret key) never appears in the log lines of a request,
// a refused one, a failed one or a replayed one, the engine's or the
// adapter's, nor in the records table; its digest does, the same on every
// line, so that one tenant's lines can be found.
func TestCredentialScopeIsNotLogged(t *testing.T) {
	const secret = "sk_live_51HxCREDENTIALnotForLogs"
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	env := idemtest.New(t, idem.Options{Logger: logger})
	rt := &idemstd.Runtime{Engine: env.Engine, Logger: logger, Principal: func(r *http.Request) (string, error) {
		return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), nil
	}}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "charge"}, Key: idemhttp.KeyRule{Required: true},
		Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/charges"}
	type state struct{}
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := r.Header.Get("X-Fail") != ""
		resp, err := idemstd.Execute(r.Context(), env.Engine, nil, []idem.Phase[state]{
			{Name: "charge", Foreign: func(context.Context, string, *state) error {
				if fail {
					return errors.New("card network down")
				}
				return nil
			}},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *state) (*idem.Response, error) {
				return &idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}, nil
			}},
		})
		if err != nil {
			w.WriteHeader(500)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	send := func(key string, header ...string) {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secret)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	send("k1")
	send("k1")                     // replayed
	send("k2", "X-Fail", "1")      // failed after a foreign call: the engine's failure line
	send(strings.Repeat("x", 300)) // refused: an invalid key
	if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), "CREDENTIAL") {
		t.Fatalf("the credential is in the logs:\n%s", logs.String())
	}
	// Nor in the records table: the failed execution's claim, in
	// progress, keeps the scope's digest; the completed ones keep no scope.
	var table string
	if err := env.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(r::text, ' '), '') FROM records AS r`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	if table == "" || strings.Contains(table, secret) || strings.Contains(table, "CREDENTIAL") {
		t.Fatalf("the records table holds the credential (or nothing): %s", table)
	}
	digest := env.Engine.LogScope(secret)
	if !strings.HasPrefix(digest, "sha256:") || strings.Count(logs.String(), digest) < 4 {
		t.Errorf("the scope's digest %s is on %d lines; want it on the request lines and the failure's:\n%s", digest, strings.Count(logs.String(), digest), logs.String())
	}
}
