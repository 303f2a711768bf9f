package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

type service struct {
	url   string
	e     http.Handler
	cards *cardnet.Network
	count func(sql string) int
}

// newService runs the payments service in-process on its own schema.
func newService(t testing.TB) *service {
	t.Helper()
	env := idemtest.New(t, idem.Options{})
	pool, schema, eng := env.Pool, env.Schema, env.Engine
	ctx := context.Background()
	if err := api.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	network := cardnet.New(cardnet.Options{})
	t.Cleanup(network.Close)
	cards := httptest.NewServer(network)
	t.Cleanup(cards.Close)
	e, err := api.NewServer(api.ServerConfig{Pool: pool, Engine: eng, CardURL: cards.URL, WebhookSecret: []byte("whsec_test")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &service{url: srv.URL, e: e, cards: network, count: func(sql string) int {
		var n int
		if err := pool.QueryRow(ctx, strings.ReplaceAll(sql, "records", schema+".records")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}}
}

type answer struct {
	status  int
	ctype   string
	problem struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	body string
}

func do(t *testing.T, url string, headers [][2]string, body string) answer {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for _, h := range headers {
		req.Header.Add(h[0], h[1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, ctype: res.Header.Get("Content-Type"), body: string(b)}
	json.Unmarshal(b, &a.problem)
	return a
}

const payment = `{"amount":1000,"currency":"EUR","customer":"ada@example.com"}`

func hdrs(key string, more ...[2]string) [][2]string {
	h := [][2]string{{"Authorization", "Bearer acct_a"}, {"Content-Type", "application/json"}}
	if key != "" {
		h = append(h, [2]string{"Idempotency-Key", key})
	}
	return append(h, more...)
}

// TestBadInput: every malformed request gets its documented 4xx as
// problem+json, never a 500, and leaves nothing claimed.
func TestBadInput(t *testing.T) {
	s := newService(t)
	url := s.url + "/payments"
	nested := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	cases := []struct {
		name    string
		headers [][2]string
		body    string
		status  int
		typ     string // problem type; "about:blank" for plain HTTP refusals
	}{
		{"missing key", hdrs(""), payment, 400, "urn:idemgen:problem:missing-key"},
		{"empty key", hdrs("", [2]string{"Idempotency-Key", ""}), payment, 400, "urn:idemgen:problem:invalid-key"},
		{"empty sf-string", hdrs(`""`), payment, 400, "urn:idemgen:problem:invalid-key"},
		{"over-long key", hdrs(strings.Repeat("k", 256)), payment, 400, "urn:idemgen:problem:invalid-key"},
		{"tab inside the key", hdrs("a\tb"), payment, 400, "urn:idemgen:problem:invalid-key"},
		{"non-ASCII key", hdrs("clé"), payment, 400, "urn:idemgen:problem:invalid-key"},
		{"unterminated sf-string", hdrs(`"abc`), payment, 400, "urn:idemgen:problem:invalid-key"},
		{"duplicated header", hdrs("a", [2]string{"Idempotency-Key", "b"}), payment, 400, "urn:idemgen:problem:invalid-key"},
		{"no principal", [][2]string{{"Content-Type", "application/json"}, {"Idempotency-Key", "k"}}, payment, 401, "about:blank"},
		{"malformed JSON", hdrs("k-malformed"), `{"amount":`, 400, "urn:idemgen:problem:invalid-request"},
		{"duplicate member", hdrs("k-dup"), `{"amount":1,"amount":2,"currency":"EUR","customer":"a"}`, 400, "urn:idemgen:problem:invalid-request"},
		{"deeply nested JSON", hdrs("k-nested"), nested, 400, "urn:idemgen:problem:invalid-request"},
		{"wrong content type", [][2]string{{"Authorization", "Bearer acct_a"}, {"Content-Type", "text/plain"}, {"Idempotency-Key", "k-ctype"}}, payment, 415, "urn:idemgen:problem:unsupported-media-type"},
		{"unknown field", hdrs("k-unknown"), `{"amount":1000,"currency":"EUR","customer":"a","tip":5}`, 400, "about:blank"},
		{"wrong type", hdrs("k-type"), `{"amount":"1000","currency":"EUR","customer":"a"}`, 400, "about:blank"},
		{"invalid values (released by the phase)", hdrs("k-invalid"), `{"amount":-5,"currency":"EURO","customer":""}`, 400, "about:blank"},
		{"body over the limit", hdrs("k-big"), `{"customer":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "urn:idemgen:problem:request-too-large"},
		{"NUL in a JSON string", hdrs("k-nul"), `{"amount":1000,"currency":"EUR","customer":"ada\u0000@example.com"}`, 400, "urn:idemgen:problem:invalid-request"},
		{"NUL in a member name", hdrs("k-nul-name"), `{"amount":1000,"currency":"EUR","customer":"a","x\u0000":1}`, 400, "urn:idemgen:problem:invalid-request"},
		{"principal over the bound", [][2]string{{"Authorization", "Bearer " + strings.Repeat("a", 300)}, {"Content-Type", "application/json"}, {"Idempotency-Key", "k-long-principal"}}, payment, 400, "urn:idemgen:problem:invalid-scope"},
		{"principal not UTF-8", [][2]string{{"Authorization", "Bearer acct_\xff\xfe"}, {"Content-Type", "application/json"}, {"Idempotency-Key", "k-latin1"}}, payment, 400, "urn:idemgen:problem:invalid-scope"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.count(`SELECT count(*) FROM records`)
			a := do(t, url, tc.headers, tc.body)
			if a.status != tc.status || a.ctype != "application/problem+json" || a.problem.Type != tc.typ || a.problem.Status != tc.status {
				t.Fatalf("got %d %s %.200s; want %d problem %s", a.status, a.ctype, a.body, tc.status, tc.typ)
			}
			if after := s.count(`SELECT count(*) FROM records`); after != before {
				t.Fatalf("the refused request left %d new records", after-before)
			}
		})
	}
	if n := s.count(`SELECT count(*) FROM records WHERE owner_token IS NOT NULL`); n != 0 {
		t.Fatalf("%d records left claimed", n)
	}
}

// TestKeyForms: a quoted sf-string and the bare token name the same key.
func TestKeyForms(t *testing.T) {
	s := newService(t)
	first := do(t, s.url+"/payments", hdrs(`"same-key"`), payment)
	again := do(t, s.url+"/payments", hdrs("same-key"), payment)
	if first.status != 201 || again.status != 201 || again.body != first.body {
		t.Fatalf("quoted then bare: %d %s / %d %s", first.status, first.body, again.status, again.body)
	}
}

// TestKeyReuse: a key reused by another operation or another tenant is
// another record: neither sees the other's response.
func TestKeyReuse(t *testing.T) {
	s := newService(t)
	before := s.count(`SELECT count(*) FROM records`)
	a := do(t, s.url+"/payments", hdrs("shared"), payment)
	if a.status != 201 {
		t.Fatalf("tenant A: %d %s", a.status, a.body)
	}
	// The same key on POST /refunds is a refund request of its own: here a
	// refund of a payment that does not exist, the documented 404.
	r := do(t, s.url+"/refunds", hdrs("shared"), `{"payment_id":999,"amount":1}`)
	if r.status != 404 || r.ctype != "application/problem+json" || r.problem.Type != "urn:payments:problem:no-payment" {
		t.Fatalf("same key, other operation: %d %s", r.status, r.body)
	}
	b := do(t, s.url+"/payments", [][2]string{{"Authorization", "Bearer acct_b"}, {"Content-Type", "application/json"}, {"Idempotency-Key", "shared"}}, payment)
	if b.status != 201 || b.body == a.body {
		t.Fatalf("same key, other tenant: %d %s (tenant A got %s)", b.status, b.body, a.body)
	}
	if n := s.count(`SELECT count(*) FROM records`) - before; n != 3 {
		t.Fatalf("%d records for the shared key; want 3 (two tenants, two operations)", n)
	}
}

// TestControlCharacterOnTheWire: a raw control character in the header
// never reaches the service: Go's HTTP server refuses the request first
// (400), and nothing is claimed.
func TestControlCharacterOnTheWire(t *testing.T) {
	s := newService(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer acct_a\r\nContent-Type: application/json\r\nIdempotency-Key: a\x01b\r\nContent-Length: %d\r\n\r\n%s", len(payment), payment)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Fatalf("status %d; want 400", res.StatusCode)
	}
	if n := s.count(`SELECT count(*) FROM records`); n != 0 {
		t.Fatalf("%d records", n)
	}
}

// FuzzRequestPath sends arbitrary keys, content types and bodies through
// the whole service (middleware, binding, engine, phases, PostgreSQL): the
// answer is never a 5xx, every refusal is problem+json, and no request
// leaves a record claimed.
func FuzzRequestPath(f *testing.F) {
	f.Add("k1", "application/json", []byte(payment))
	f.Add(`"k2"`, "application/json", []byte(`{"amount":402,"currency":"EUR","customer":"x"}`))
	f.Add("", "application/json", []byte(`{}`))
	f.Add("k3", "text/plain", []byte(`amount=1`))
	f.Add("k4", "application/json", []byte(`[1,2,{"a":null}]`))
	f.Add("k5", "application/json; charset=utf-8", []byte(`{"amount":1e3,"currency":"EUR","customer":"y","client_ts":"t"}`))
	s := newService(f)
	f.Fuzz(func(t *testing.T, key, ctype string, body []byte) {
		req := httptest.NewRequest("POST", "/payments", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer fuzz")
		req.Header.Set("Content-Type", ctype)
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		rec := httptest.NewRecorder()
		s.e.ServeHTTP(rec, req)
		switch {
		case rec.Code >= 500:
			t.Fatalf("%d %s for key %q, type %q, body %q", rec.Code, rec.Body, key, ctype, body)
		case rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json":
			t.Fatalf("%d refusal is not problem+json: %s", rec.Code, rec.Header().Get("Content-Type"))
		}
		if n := s.count(`SELECT count(*) FROM records WHERE owner_token IS NOT NULL`); n != 0 {
			t.Fatalf("%d records left claimed after key %q, body %q", n, key, body)
		}
	})
}

// TestReplayBeforeTheBinder: a retry whose body echo's binder refuses
// (1000.0 for an int64) but whose fingerprint is the completed request's
// gets the stored answer, not the binder's 400.
func TestReplayBeforeTheBinder(t *testing.T) {
	s := newService(t)
	url := s.url + "/payments"
	first := do(t, url, hdrs("k-bind"), payment)
	if first.status != 201 {
		t.Fatalf("the payment: %+v", first)
	}
	again := do(t, url, hdrs("k-bind"), strings.Replace(payment, `1000`, `1000.0`, 1))
	if again.status != 201 || again.body != first.body {
		t.Fatalf("the retry with 1000.0: %+v; want the stored %+v", again, first)
	}
	if r := do(t, url, hdrs("k-bind-new"), strings.Replace(payment, `1000`, `1000.0`, 1)); r.status != 400 {
		t.Fatalf("1000.0 under a new key: %+v; want the binder's 400", r)
	}
	if n := len(s.cards.Charges()); n != 1 {
		t.Fatalf("%d charges; want 1", n)
	}
}
