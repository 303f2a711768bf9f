package idemstd_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/idemgen/idemgen/runtime/idempreset"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// stripeService is an operation served on an engine with Stripe's
// contract (idempreset.Stripe), whose execution waits for release when it is
// not nil, and a log of its request lines.
type stripeService struct {
	h       http.Handler
	logs    *bytes.Buffer
	release chan struct{}
	started chan struct{}
}

func newStripeService(t *testing.T) *stripeService {
	env := idemtest.New(t, idem.Options{Logger: slog.New(slog.DiscardHandler), Contract: idempreset.Stripe()})
	s := &stripeService{logs: &bytes.Buffer{}, started: make(chan struct{}, 16)}
	rt := &idemstd.Runtime{Engine: env.Engine, Logger: slog.New(slog.NewJSONHandler(s.logs, nil))}
	// Claimed apart from its phase: a duplicate finds the key held (in
	// last mode it would run the phase itself).
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "createCharge", Policy: idem.Policy{Claim: idem.ClaimSeparate}}, Key: idemhttp.KeyRule{Required: true, Format: idemtype.KeyFormatRaw},
		Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/v1/charges"}
	type state struct{}
	s.h = idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := idemstd.Execute(r.Context(), env.Engine, nil, []idem.Phase[state]{{Name: "charge",
			Final: func(ctx context.Context, tx pgx.Tx, _ *state) (*idem.Response, error) {
				s.started <- struct{}{}
				if s.release != nil {
					<-s.release
				}
				return &idem.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_1","object":"charge"}`)}, nil
			}}})
		if err != nil {
			t.Error(err)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	return s
}

func (s *stripeService) post(key, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	return rec
}

// TestStripeHeaders: on an engine with Stripe's contract every answer
// carries a new Request-Id, logged with the request's line, and the key as
// the client sent it; a replay names the request that made its answer in
// Original-Request; a refusal says whether a retry may get past it.
func TestStripeHeaders(t *testing.T) {
	s := newStripeService(t)
	key := `order 42 "é"`
	first := s.post(key, "amount=100&currency=usd")
	id := first.Header().Get("Request-Id")
	if first.Code != 200 || !strings.HasPrefix(id, "req_") || len(id) != len("req_")+14 {
		t.Fatalf("first answer: %d, Request-Id %q; want 200 and a req_ id", first.Code, id)
	}
	if got := first.Header().Get("Idempotency-Key"); got != key {
		t.Errorf("the key echoed: %q; want %q", got, key)
	}
	if first.Header().Get("Original-Request") != "" || first.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("the first answer says it is a replay: %v", first.Header())
	}
	var line map[string]any
	if err := json.Unmarshal(bytes.SplitN(s.logs.Bytes(), []byte("\n"), 2)[0], &line); err != nil || line["request_id"] != id {
		t.Errorf("the request line's request_id: %v (%v); want %s", line["request_id"], err, id)
	}

	replay := s.post(key, "amount=100&currency=usd")
	rid := replay.Header().Get("Request-Id")
	if replay.Code != 200 || replay.Header().Get("Idempotent-Replayed") != "true" || rid == "" || rid == id {
		t.Fatalf("the replay: %d %v; want 200, replayed, a Request-Id of its own", replay.Code, replay.Header())
	}
	if got := replay.Header().Get("Original-Request"); got != id {
		t.Errorf("the replay's Original-Request: %q; want the first request's id %q", got, id)
	}
	if replay.Body.String() != first.Body.String() {
		t.Errorf("the replay's body %q; want the first's %q", replay.Body, first.Body)
	}

	// The same key with other parameters: Stripe's idempotency_error, 400,
	// not worth a retry.
	reused := s.post(key, "amount=200&currency=usd")
	assertStripeError(t, "a reused key", reused, 400, "idempotency_error", "", "false")

	// A key in use by a request in flight, with a client that will not
	// wait: 429 lock_timeout, worth a retry, and one stripe-go retries.
	s.release = make(chan struct{})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- s.post("k2", "amount=1") }()
	<-s.started
	<-s.started // the first request's, above
	busy := s.post("k2", "amount=1", "Prefer", "wait=0")
	assertStripeError(t, "a key in flight", busy, 429, "idempotency_error", "lock_timeout", "true")
	if busy.Header().Get("Retry-After") == "" {
		t.Errorf("the in-flight refusal has no Retry-After: %v", busy.Header())
	}
	close(s.release)
	if r := <-done; r.Code != 200 {
		t.Errorf("the execution in flight: %d", r.Code)
	}

	// A refusal before any execution (a key too long) carries the
	// request id and a message too.
	long := s.post(strings.Repeat("é", 256), "amount=1")
	assertStripeError(t, "a key too long", long, 400, "invalid_request_error", "", "false")
}

func assertStripeError(t *testing.T, what string, rec *httptest.ResponseRecorder, status int, typ, code, retry string) {
	t.Helper()
	var body struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %d %q: %v", what, rec.Code, rec.Body, err)
	}
	e := body.Error
	if rec.Code != status || e.Type != typ || e.Code != code || e.Message == "" {
		t.Errorf("%s: %d %+v; want %d, type %s, code %q and a message", what, rec.Code, e, status, typ, code)
	}
	if got := rec.Header().Get("Stripe-Should-Retry"); got != retry {
		t.Errorf("%s: Stripe-Should-Retry %q; want %s", what, got, retry)
	}
	if !strings.HasPrefix(rec.Header().Get("Request-Id"), "req_") {
		t.Errorf("%s: no Request-Id: %v", what, rec.Header())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
}

// TestStripeHeadersOnEveryAnswer: a request the service fails before the
// engine (its principal resolver errs) still carries its request id and
// key; a failure stored for replay (ambiguous: store) says, on its first
// answer and on every replay, that a retry will not get past it.
func TestStripeHeadersOnEveryAnswer(t *testing.T) {
	env := idemtest.New(t, idem.Options{Logger: slog.New(slog.DiscardHandler), Contract: idempreset.Stripe()})
	rt := &idemstd.Runtime{Engine: env.Engine, Principal: func(*http.Request) (string, error) { return "", errors.New("the token service is down") }}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true, Format: idemtype.KeyFormatRaw},
		Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/x"}
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler ran") }))
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k 1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 500 || !strings.HasPrefix(rec.Header().Get("Request-Id"), "req_") || rec.Header().Get("Idempotency-Key") != "k 1" {
		t.Errorf("a failing principal: %d %v; want the 500 with a Request-Id and the key", rec.Code, rec.Header())
	}

	rt = &idemstd.Runtime{Engine: env.Engine}
	stored := &idemstd.Spec{Operation: &idem.Operation{ID: "stored", Policy: idem.Policy{Ambiguous: idemtype.AmbiguousStore}},
		Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/y"}
	type state struct{}
	h = idemstd.Middleware(rt, stored)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := idemstd.Execute(r.Context(), env.Engine, nil, []idem.Phase[state]{
			{Name: "charge", Foreign: func(context.Context, string, *state) error { return errors.New("declined by the network") }},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *state) (*idem.Response, error) { return &idem.Response{Status: 200}, nil }},
		})
		if err != nil {
			t.Error(err)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	for i, what := range []string{"the first answer", "the replay"} {
		req := httptest.NewRequest(http.MethodPost, "/y", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 500 || rec.Header().Get("Stripe-Should-Retry") != "false" || (i == 1) != (rec.Header().Get("Idempotent-Replayed") == "true") {
			t.Errorf("%s of a stored failure: %d %v; want 500 with Stripe-Should-Retry: false", what, rec.Code, rec.Header())
		}
	}
}
