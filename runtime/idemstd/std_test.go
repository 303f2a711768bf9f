package idemstd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestServiceFailureStaysInTheServer: a Principal that fails is a plain
// 500 by default; its text, the service's own, is not sent to the client.
func TestServiceFailureStaysInTheServer(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	rt := &idemstd.Runtime{Engine: env.Engine, Principal: func(*http.Request) (string, error) {
		return "", errors.New("dial tcp 10.0.0.7:5432: password authentication failed for user svc")
	}}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true},
		Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/x"}
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran")
	}))
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 500 || strings.Contains(string(body), "password") {
		t.Fatalf("%d %q; want a plain 500", rec.Code, body)
	}
}

// TestRequestLogAfterAFailedTakeover: the request line of a retry that took
// an abandoned execution over says resumed, and which phase failed, also
// when that phase then fails.
func TestRequestLogAfterAFailedTakeover(t *testing.T) {
	env := idemtest.New(t, idem.Options{Logger: slog.New(slog.DiscardHandler)})
	var logs bytes.Buffer
	rt := &idemstd.Runtime{Engine: env.Engine, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	type state struct{}
	attempt := 0
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempt++
		resp, err := idemstd.Execute(r.Context(), env.Engine, []byte("{}"), []idem.Phase[state]{
			{Name: "charge", Foreign: func(context.Context, string, *state) error {
				if attempt == 1 {
					runtime.Goexit() // the first owner dies mid-call
				}
				return nil
			}},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *state) (*idem.Response, error) {
				return nil, errors.New("the ledger refused")
			}},
		})
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	send := func() {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		done := make(chan struct{})
		go func() { defer close(done); h.ServeHTTP(httptest.NewRecorder(), req) }()
		<-done
	}
	send()
	if _, err := env.Pool.Exec(context.Background(), `UPDATE records SET lease_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	send()
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("%v: %q", err, logs.String())
	}
	if line["status"] != 500.0 || line["resumed"] != true || line["failed_phase"] != "finish" {
		t.Errorf("the takeover's request line: %v; want status 500, resumed, failed_phase finish", line)
	}
}
