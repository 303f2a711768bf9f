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
