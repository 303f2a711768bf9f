package idemstd_test

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestMultipartRetryReplays: an upload retried by a client that encodes
// its form again (a new random boundary, as Go's multipart.Writer, browsers
// and curl -F draw) is the same request: the retry gets the first answer,
// replayed, not 422.
func TestMultipartRetryReplays(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	rt := &idemstd.Runtime{Engine: env.Engine}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "upload"}, Key: idemhttp.KeyRule{Required: true},
		Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/uploads", MediaTypes: []string{"multipart/form-data"}}
	runs := 0
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			t.Errorf("the handler cannot read the form: %v", err)
		}
		resp, err := idemstd.Execute(r.Context(), env.Engine, nil, []idem.Phase[struct{}]{{Name: "store",
			Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
				runs++
				return &idem.Response{Status: http.StatusCreated, Body: []byte(`{"id":"up_1"}`)}, nil
			}}})
		if err != nil {
			t.Error(err)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	upload := func() *httptest.ResponseRecorder {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b) // a random boundary each time
		mw.WriteField("title", "Q3 invoice")
		fw, _ := mw.CreateFormFile("document", "invoice.pdf")
		fw.Write([]byte("%PDF-1.7 ..."))
		mw.Close()
		req := httptest.NewRequest(http.MethodPost, "/uploads", &b)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Idempotency-Key", "upload-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first, retry := upload(), upload()
	if first.Code != 201 || retry.Code != 201 || retry.Header().Get("Idempotent-Replayed") != "true" || runs != 1 {
		t.Fatalf("first %d, retry %d %v, %d runs; want 201, the 201 replayed, one run", first.Code, retry.Code, retry.Header(), runs)
	}
}
