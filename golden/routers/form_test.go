package routers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	formapi "github.com/idemgen/idemgen/golden/form_body/out"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
)

type subscribe struct{ runs atomic.Int32 }

func (s *subscribe) Execute(context.Context, pgx.Tx, formapi.SubscribeRequestObject, *formapi.SubscribeState) (formapi.SubscribeResponseObject, error) {
	s.runs.Add(1)
	return formapi.Subscribe201Response{}, nil
}

// TestFormBodies: golden/form_body's echo service as a form API's clients
// use it. Bracketed fields fall under their pointers (a retry that adds
// expand[] or changes metadata[trace_id] is the same request); a field the
// binder cannot parse is 400 with nothing claimed; a body of a media type
// the operation does not declare is 415 before anything is claimed.
func TestFormBodies(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	e := echo.New()
	svc := &subscribe{}
	if err := formapi.Register(e, nil, formapi.Phases{Subscribe: svc}, &idemecho.Runtime{Engine: env.Engine}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	post := func(key, contentType, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/subscriptions", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		return res.StatusCode, res.Header.Get("Idempotent-Replayed")
	}
	const form = "application/x-www-form-urlencoded"
	first := url.Values{"email": {"ada@example.com"}, "metadata[trace_id]": {"t1"}}.Encode()
	retry := url.Values{"email": {"ada@example.com"}, "metadata[trace_id]": {"t2"}, "expand[]": {"customer"}, "expand[0]": {"invoice"}}.Encode()
	if status, _ := post("k1", form, first); status != 201 {
		t.Fatalf("the first request: %d", status)
	}
	if status, replayed := post("k1", form, retry); status != 201 || replayed != "true" {
		t.Fatalf("a retry adding expand[] and another metadata[trace_id]: %d, replayed %q; want the replay", status, replayed)
	}
	if status, _ := post("k1", form, url.Values{"email": {"bob@example.com"}}.Encode()); status != 422 {
		t.Fatalf("another email under the key: %d; want 422", status)
	}
	if status, _ := post("k2", form, "email=ada%40example.com&seats=abc"); status != 400 {
		t.Fatalf("seats=abc: %d; want 400", status)
	}
	if status, _ := post("k2", form, "email=ada%40example.com&seats=2"); status != 201 {
		t.Fatalf("the same key, seats=2: %d; want 201, nothing having been claimed", status)
	}
	if status, _ := post("k3", "application/json", `{"email":"ada@example.com"}`); status != 415 {
		t.Fatalf("a JSON body: %d; want 415", status)
	}
	if n := svc.runs.Load(); n != 2 {
		t.Fatalf("%d executions; want 2", n)
	}
}
