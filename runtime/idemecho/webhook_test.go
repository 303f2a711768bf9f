package idemecho_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemsig"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

var (
	acmeSecret  = []byte("whsec_acme")
	otherSecret = []byte("whsec_other")
)

type receiver struct {
	url   string
	count func(sql string) int
}

// webhookServer is what generated code does for an operation with
// key: {pointer: /id} and scope: sender:acme, written by hand: the
// verifier runs over the raw body, the event id is the key, and the phase
// records the event.
func webhookServer(t *testing.T, senders map[string]idemsig.Verifier) *receiver {
	t.Helper()
	env := idemtest.New(t, idem.Options{})
	pool, schema, eng := env.Pool, env.Schema, env.Engine
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE events (seq bigserial PRIMARY KEY, sender text, event_id text, type text)`); err != nil {
		t.Fatal(err)
	}
	rt := &idemecho.Runtime{Engine: eng, Senders: senders}
	spec := &idemecho.Spec{
		Operation: &idem.Operation{ID: "receiveEvent", Policy: idem.Policy{Lease: 10 * time.Second}},
		Key:       idemhttp.KeyRule{Pointer: "/id", Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeSender, Name: "acme"}, Route: "/webhooks",
	}
	e := echo.New()
	e.HTTPErrorHandler = idemecho.HTTPErrorHandler
	e.POST("/webhooks", func(c echo.Context) error {
		var ev struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		if err := c.Bind(&ev); err != nil {
			return err
		}
		resp, err := idemecho.Execute(c.Request().Context(), rt, nil, []idem.Phase[struct{}]{
			{Name: "apply", Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
				var seq int64
				if err := tx.QueryRow(ctx, `INSERT INTO events (sender, event_id, type) VALUES ($1, $2, $3) RETURNING seq`,
					idem.ExecutionFrom(ctx).Scope, ev.ID, ev.Type).Scan(&seq); err != nil {
					return nil, err
				}
				return idemecho.Render(func(w http.ResponseWriter) error {
					w.Header().Set("Content-Type", "application/json")
					return json.NewEncoder(w).Encode(map[string]any{"event": ev.ID, "seq": seq})
				})
			}},
		})
		if err != nil {
			return err
		}
		return idemecho.Writer(c.Request().Context(), resp)(c.Response())
	}, idemecho.Middleware(rt, spec))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &receiver{url: srv.URL + "/webhooks", count: func(sql string) int {
		var n int
		if err := pool.QueryRow(ctx, strings.ReplaceAll(sql, "records", schema+".records")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}}
}

func acme() map[string]idemsig.Verifier {
	return map[string]idemsig.Verifier{"acme": &idemsig.HMAC{Header: "Acme-Signature", Secrets: []idemsig.Secret{
		{Sender: "acme", Key: acmeSecret}, {Sender: "acme-eu", Key: otherSecret}}}}
}

// deliver sends body as a delivery signed with secret now (nil: unsigned).
func deliver(t *testing.T, url string, body string, secret []byte) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if secret != nil {
		req.Header.Set("Acme-Signature", idemsig.Sign(time.Now(), []byte(body), secret))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(b)}
}

func wantProblem(t *testing.T, r reply, status int, kind idemtype.ErrorKind) {
	t.Helper()
	var p idemtype.Problem
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(r.body), &p) != nil || p.Type != idemtype.ProblemTypeBase+string(kind) {
		t.Fatalf("got %d %s %s; want %d problem %s", r.status, r.header.Get("Content-Type"), r.body, status, kind)
	}
}

const event = `{"id":"evt_1","type":"charge.succeeded","amount":1000}`

// TestWebhookDuplicateDeliveryIsReplayed: the sender delivers one event
// twice, signed anew each time; the second delivery gets the first's
// response, marked replayed, and the event is applied once.
func TestWebhookDuplicateDeliveryIsReplayed(t *testing.T) {
	r := webhookServer(t, acme())
	first := deliver(t, r.url, event, acmeSecret)
	if first.status != 200 || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first delivery: %+v", first)
	}
	time.Sleep(1100 * time.Millisecond) // the next signature carries another timestamp
	again := deliver(t, r.url, `{"type":"charge.succeeded", "amount":1000, "id":"evt_1"}`, acmeSecret)
	if again.status != 200 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second delivery: %+v; want the first's %q, replayed", again, first.body)
	}
	if n := r.count(`SELECT count(*) FROM events WHERE event_id = 'evt_1'`); n != 1 {
		t.Fatalf("the event was applied %d times; want 1", n)
	}
	// The key is scoped to the sender: another sender's evt_1 is its own event.
	other := deliver(t, r.url, event, otherSecret)
	if other.status != 200 || other.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("another sender's evt_1: %+v", other)
	}
	if n := r.count(`SELECT count(DISTINCT sender) FROM events WHERE event_id = 'evt_1'`); n != 2 {
		t.Fatalf("%d senders applied evt_1; want acme and acme-eu", n)
	}
	t.Logf("first: %d %s; duplicate: %d Idempotent-Replayed: %s %s", first.status, first.body, again.status,
		again.header.Get("Idempotent-Replayed"), again.body)
}

// TestWebhookSameIDOtherBody: a second event under an id already used is
// 422, and is not applied.
func TestWebhookSameIDOtherBody(t *testing.T) {
	r := webhookServer(t, acme())
	if first := deliver(t, r.url, event, acmeSecret); first.status != 200 {
		t.Fatalf("first delivery: %+v", first)
	}
	other := deliver(t, r.url, `{"id":"evt_1","type":"charge.refunded","amount":1000}`, acmeSecret)
	wantProblem(t, other, 422, idemtype.KindMismatch)
	if n := r.count(`SELECT count(*) FROM events`); n != 1 {
		t.Fatalf("%d events applied; want 1", n)
	}
	t.Logf("same id, other body: %d %s", other.status, other.body)
}

// TestWebhookBadSignature: an unsigned, forged, stale or tampered delivery
// is 401 invalid-signature, and nothing is claimed or applied.
func TestWebhookBadSignature(t *testing.T) {
	r := webhookServer(t, acme())
	send := func(body, signature string) reply {
		req, _ := http.NewRequest("POST", r.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Acme-Signature", signature)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return reply{res.StatusCode, res.Header, string(b)}
	}
	for name, rep := range map[string]reply{
		"unsigned":             deliver(t, r.url, event, nil),
		"forged":               deliver(t, r.url, event, []byte("whsec_guess")),
		"stale":                send(event, idemsig.Sign(time.Now().Add(-time.Hour), []byte(event), acmeSecret)),
		"tampered":             send(`{"id":"evt_1","type":"charge.succeeded","amount":1}`, idemsig.Sign(time.Now(), []byte(event), acmeSecret)),
		"malformed":            send(event, "sha256=0123"),
		"missing id, unsigned": deliver(t, r.url, `{"type":"charge.succeeded"}`, nil),
	} {
		wantProblem(t, rep, 401, idemtype.KindInvalidSignature)
		t.Logf("%s: %d %s", name, rep.status, rep.body)
	}
	if n := r.count(`SELECT count(*) FROM records`); n != 0 {
		t.Fatalf("%d records claimed by refused deliveries", n)
	}
	if n := r.count(`SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d events applied by refused deliveries", n)
	}
}

// TestWebhookMissingID: a signed event without its id, or with an id that
// is not a key, is 400 and claims nothing.
func TestWebhookMissingID(t *testing.T) {
	r := webhookServer(t, acme())
	wantProblem(t, deliver(t, r.url, `{"type":"charge.succeeded"}`, acmeSecret), 400, idemtype.KindMissingKey)
	wantProblem(t, deliver(t, r.url, `{"id":null,"type":"charge.succeeded"}`, acmeSecret), 400, idemtype.KindMissingKey)
	wantProblem(t, deliver(t, r.url, `{"id":"","type":"charge.succeeded"}`, acmeSecret), 400, idemtype.KindInvalidKey)
	wantProblem(t, deliver(t, r.url, `{"id":{"v":1},"type":"charge.succeeded"}`, acmeSecret), 400, idemtype.KindInvalidKey)
	wantProblem(t, deliver(t, r.url, `{"id":"`+strings.Repeat("e", 300)+`"}`, acmeSecret), 400, idemtype.KindInvalidKey)
	wantProblem(t, deliver(t, r.url, `{"id":"evt_1"`, acmeSecret), 400, idemtype.KindInvalidRequest)
	missing := deliver(t, r.url, `{"type":"charge.succeeded"}`, acmeSecret)
	if n := r.count(`SELECT count(*) FROM records`) + r.count(`SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d records or events after refused deliveries", n)
	}
	t.Logf("missing id: %d %s", missing.status, missing.body)
}

// TestWebhookVerifierFailure: a verifier that fails (rather than refusing)
// is a 500, and a route whose sender has no verifier is a 500 too: neither
// is the sender's fault.
func TestWebhookVerifierFailure(t *testing.T) {
	broken := idemsig.VerifierFunc(func(*http.Request, []byte) (string, error) {
		return "", errors.New("secret store unreachable")
	})
	for name, senders := range map[string]map[string]idemsig.Verifier{
		"failing verifier": {"acme": broken},
		"no verifier":      nil,
	} {
		r := webhookServer(t, senders)
		if got := deliver(t, r.url, event, acmeSecret); got.status != 500 {
			t.Fatalf("%s: %+v; want 500", name, got)
		}
		if n := r.count(`SELECT count(*) FROM records`); n != 0 {
			t.Fatalf("%s: %d records", name, n)
		}
	}
}
