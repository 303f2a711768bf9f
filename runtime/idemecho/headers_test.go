package idemecho_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idempreset"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestStripeHeaders: on an engine with Stripe's contract, echo's answers
// carry a request id (a refusal's too), the key, and on a replay the
// original request's id.
func TestStripeHeaders(t *testing.T) {
	env := idemtest.New(t, idem.Options{Contract: idempreset.Stripe()})
	rt := &idemecho.Runtime{Engine: env.Engine}
	spec := &idemecho.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true, Format: idemtype.KeyFormatRaw},
		Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	e := echo.New()
	e.HTTPErrorHandler = idemecho.HTTPErrorHandler
	e.POST("/x", func(c echo.Context) error {
		resp, err := idemecho.Execute(c.Request().Context(), rt, nil, []idem.Phase[struct{}]{{Name: "only",
			Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
				return &idem.Response{Status: http.StatusCreated, Body: []byte("{}")}, nil
			}}})
		if err != nil {
			return err
		}
		return idemecho.Writer(c.Request().Context(), resp)(c.Response())
	}, idemecho.Middleware(rt, spec))
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
