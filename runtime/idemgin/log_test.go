package idemgin_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idempreset"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestLogLine: with a Logger, every idempotent request gets its line, a
// success (no error on the context) and a refusal alike.
func TestLogLine(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	var logs bytes.Buffer
	rt := &idemgin.Runtime{Engine: env.Engine, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	spec := &idemgin.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true},
		Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.POST("/x", idemgin.Middleware(rt, spec), func(c *gin.Context) {
		resp, err := idemgin.Execute(c, rt, nil, []idem.Phase[struct{}]{{Name: "only",
			Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
				return &idem.Response{Status: http.StatusCreated, Body: []byte("{}")}, nil
			}}})
		if err != nil {
			c.AbortWithError(500, err)
			return
		}
		idemgin.Writer(c, resp)(c.Writer)
	})
	for _, key := range []string{"k", ""} {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
	}
	if got := logs.String(); strings.Count(got, "idempotent request") != 2 || !strings.Contains(got, "status=201") || !strings.Contains(got, "status=400") {
		t.Fatalf("log lines:\n%s\nwant one for the 201 and one for the 400", got)
	}
}

// TestStripeHeaders: on an engine with Stripe's contract, gin's answers
// carry a request id (a refusal's too), the key, and on a replay the
// original request's id.
func TestStripeHeaders(t *testing.T) {
	env := idemtest.New(t, idem.Options{Contract: idempreset.Stripe()})
	rt := &idemgin.Runtime{Engine: env.Engine}
	spec := &idemgin.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true, Format: idemtype.KeyFormatRaw},
		Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.POST("/x", idemgin.Middleware(rt, spec), func(c *gin.Context) {
		resp, err := idemgin.Execute(c, rt, nil, []idem.Phase[struct{}]{{Name: "only",
			Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
				return &idem.Response{Status: http.StatusCreated, Body: []byte("{}")}, nil
			}}})
		if err != nil {
			c.AbortWithError(500, err)
			return
		}
		idemgin.Writer(c, resp)(c.Writer)
	})
	send := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
	first, replay, refused := send("k 1"), send("k 1"), send("")
	id := first.Header().Get("Request-Id")
	if first.Code != 201 || !strings.HasPrefix(id, "req_") || first.Header().Get("Idempotency-Key") != "k 1" {
		t.Errorf("the first answer: %d %v", first.Code, first.Header())
	}
	if replay.Header().Get("Original-Request") != id || replay.Header().Get("Request-Id") == id {
		t.Errorf("the replay: %v; want Original-Request %s and an id of its own", replay.Header(), id)
	}
	if refused.Code != 400 || !strings.HasPrefix(refused.Header().Get("Request-Id"), "req_") || refused.Header().Get("Stripe-Should-Retry") != "false" {
		t.Errorf("the refusal: %d %v", refused.Code, refused.Header())
	}
}
