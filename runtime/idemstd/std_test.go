package idemstd_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
