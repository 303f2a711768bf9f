// Package conformance is the HTTP-level protocol suite every adapter of
// the engine passes (runtime/idemecho, runtime/idemstd, the gin adapter):
// one table of requests and the answers the Idempotency-Key protocol
// prescribes, run against a service each adapter serves its own way, so
// that no adapter can drift from the others.
package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemsig"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Route is one operation of the suite's service.
type Route struct {
	Method string
	Spec   *idemstd.Spec // Spec.Route is the OpenAPI path template
	// Handle serves the operation once the adapter's middleware let the
	// request through: it decodes the body, runs the phases with
	// idemstd.Execute and writes the response. A non-nil error is for the
	// adapter to answer its framework's way, with the status of an
	// *HTTPError (or 500).
	Handle func(w http.ResponseWriter, r *http.Request) error
}

// HTTPError is an error a handler returns with the status to answer.
type HTTPError struct {
	Status int
	Err    error
}

func (e *HTTPError) Error() string { return e.Err.Error() }
func (e *HTTPError) Unwrap() error { return e.Err }

// StatusOf is the status an adapter answers a handler's error with.
func StatusOf(err error) int {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status
	}
	return http.StatusInternalServerError
}

// Service is what an adapter serves: the suite's routes on one engine,
// with the runtime's settings every adapter has.
type Service struct {
	Engine *idem.Engine
	Routes []Route
	// Principal is the caller, from "Authorization: Bearer <principal>".
	Principal    func(r *http.Request) (string, error)
	Senders      map[string]idemsig.Verifier
	MaxBodyBytes int64
	// Logger is for the runtime's request lines: every case runs with one,
	// so that each answer's log path runs too.
	Logger *slog.Logger
}

// Adapter serves a Service: Serve returns the handler of the whole
// service, each route behind the adapter's middleware.
type Adapter struct {
	Name  string
	Serve func(t *testing.T, s *Service) http.Handler
}

// The suite's secret for the signed sender.
var acmeSecret = []byte("whsec_acme")

type env struct {
	t      *testing.T
	url    string
	count  func(sql string) int
	exec   func(sql string)
	hold   chan struct{} // closed to let a held phase go on
	inHold chan struct{} // receives when a phase holds
	runs   atomic.Int64  // phases run
}

type item struct {
	Name     string `json:"name"`
	ClientTS string `json:"client_ts,omitempty"`
	Panic    bool   `json:"panic,omitempty"`
	Hold     bool   `json:"hold,omitempty"`
	Count    int    `json:"count,omitempty"`
}

type state struct {
	ID int64 `json:"id"`
}

func newEnv(t *testing.T, a Adapter) *env {
	t.Helper()
	te := idemtest.New(t, idem.Options{ClaimWait: 200 * time.Millisecond})
	if _, err := te.Pool.Exec(context.Background(), `CREATE TABLE items (id bigserial PRIMARY KEY, grp text, name text)`); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, hold: make(chan struct{}), inHold: make(chan struct{}, 16)}
	e.exec = func(sql string) {
		if _, err := te.Pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	e.count = func(sql string) int {
		var n int
		if err := te.Pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	create := func(w http.ResponseWriter, r *http.Request) error {
		var body item
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return &HTTPError{Status: http.StatusBadRequest, Err: err}
		}
		group := idemstd.CallFrom(r.Context()).Spec.Route
		if strings.Contains(group, "{group}") {
			group = r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		}
		payload, _ := json.Marshal(body)
		resp, err := idemstd.Execute(r.Context(), te.Engine, payload, []idem.Phase[state]{{
			Name: "insert",
			Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
				e.runs.Add(1)
				switch {
				case body.Panic:
					panic("a bug in phase code")
				case body.Name == "":
					return nil, idem.Release(&HTTPError{Status: http.StatusBadRequest, Err: errors.New("name is required")})
				case body.Hold:
					e.inHold <- struct{}{}
					<-e.hold
				}
				if err := tx.QueryRow(ctx, `INSERT INTO items (grp, name) VALUES ($1, $2) RETURNING id`, group, body.Name).Scan(&s.ID); err != nil {
					return nil, err
				}
				return &idem.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
					Body: fmt.Appendf(nil, `{"id":%d,"name":%q}`, s.ID, body.Name)}, nil
			},
		}})
		if err != nil {
			return err
		}
		return idemstd.WriteResponse(w, resp, idemstd.CallFrom(r.Context()).Replayed)
	}
	// A rendered operation: its answer is stored as its id, and every replay
	// renders the item as it is now; an item named "write" has a render
	// that writes, which must fail.
	rendered := func(w http.ResponseWriter, r *http.Request) error {
		var body item
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return &HTTPError{Status: http.StatusBadRequest, Err: err}
		}
		resp, err := idemstd.Execute(r.Context(), te.Engine, nil, []idem.Phase[state]{{
			Name: "insert",
			Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
				e.runs.Add(1)
				if err := tx.QueryRow(ctx, `INSERT INTO items (grp, name) VALUES ('rendered', $1) RETURNING id`, body.Name).Scan(&s.ID); err != nil {
					return nil, err
				}
				return &idem.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}, "Location": {fmt.Sprintf("/rendered/%d", s.ID)}},
					Body: fmt.Appendf(nil, `{"id":%d,"name":%q}`, s.ID, body.Name)}, nil
			},
			Render: func(ctx context.Context, tx pgx.Tx, ref idem.Reference) (*idem.Response, error) {
				id, err := ref.Int64("/id")
				if err != nil {
					return nil, err
				}
				if body.Name == "write" {
					if _, err := tx.Exec(ctx, `UPDATE items SET name = 'written' WHERE id = $1`, id); err != nil {
						return nil, err
					}
				}
				var name string
				if err := tx.QueryRow(ctx, `SELECT name FROM items WHERE id = $1`, id).Scan(&name); err != nil {
					return nil, err
				}
				return &idem.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
					Body: fmt.Appendf(nil, `{"id":%d,"name":%q}`, id, name)}, nil
			},
		}})
		if err != nil {
			return err
		}
		return idemstd.WriteResponse(w, resp, idemstd.CallFrom(r.Context()).Replayed)
	}
	policy := idem.Policy{Lease: 10 * time.Second, Claim: idem.ClaimFirst}
	svc := &Service{
		Engine: te.Engine,
		Principal: func(r *http.Request) (string, error) {
			return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), nil
		},
		Senders:      map[string]idemsig.Verifier{"acme": &idemsig.HMAC{Header: "Acme-Signature", Secrets: []idemsig.Secret{{Sender: "acme", Key: acmeSecret}}}},
		MaxBodyBytes: 1024,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Routes: []Route{
			{Method: http.MethodPost, Handle: create, Spec: &idemstd.Spec{
				Operation: &idem.Operation{ID: "createItem", Policy: policy},
				Key:       idemhttp.KeyRule{Required: true, Format: idemtype.KeyFormatAny}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal},
				Route: "/items/{group}", Exclude: []string{"/client_ts"},
			}},
			{Method: http.MethodPost, Handle: create, Spec: &idemstd.Spec{
				Operation: &idem.Operation{ID: "createTenantItem", Policy: policy},
				Key:       idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeHeader, Name: "X-Tenant"},
				Route: "/tenant-items", MaxBodyBytes: 4096, // above the service's 1024
			}},
			{Method: http.MethodPost, Handle: create, Spec: &idemstd.Spec{
				Operation: &idem.Operation{ID: "createPathItem", Policy: policy},
				Key:       idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePath, Name: "group"},
				Route: "/tenant-paths/{group}",
			}},
			{Method: http.MethodPost, Handle: create, Spec: &idemstd.Spec{
				Operation: &idem.Operation{ID: "createOwnPathItem", Policy: policy},
				Key:       idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePath, Name: "group", Principal: true},
				Route: "/own-paths/{group}",
			}},
			{Method: http.MethodPost, Handle: create, Spec: &idemstd.Spec{
				Operation: &idem.Operation{ID: "createOptional", Policy: policy},
				Key:       idemhttp.KeyRule{}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal},
				Route: "/optional",
			}},
			{Method: http.MethodPost, Handle: rendered, Spec: &idemstd.Spec{
				Operation: &idem.Operation{ID: "createRendered", Policy: idem.Policy{Lease: 10 * time.Second, Render: []string{"/id"}}},
				Key:       idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal},
				Route: "/rendered",
			}},
			{Method: http.MethodPost, Handle: create, Spec: &idemstd.Spec{
				Operation: &idem.Operation{ID: "receiveEvent", Policy: policy},
				Key:       idemhttp.KeyRule{Pointer: "/name", Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeSender, Name: "acme"},
				Route: "/webhooks",
			}},
		},
	}
	srv := httptest.NewServer(a.Serve(t, svc))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (e *env) post(path string, header map[string]string, body string) reply {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(b)}
}

// keyed is the headers of a caller acct1 sending key.
func keyed(key string) map[string]string {
	return map[string]string{"Idempotency-Key": key, "Authorization": "Bearer acct1"}
}

// problem reports whether r is the problem of kind.
func (r reply) problem(kind idemtype.ErrorKind) bool {
	var p idemtype.Problem
	return r.status == kind.Status() && strings.HasPrefix(r.header.Get("Content-Type"), idemtype.ProblemContentType) &&
		json.Unmarshal([]byte(r.body), &p) == nil && p.Type == kind.ProblemType()
}

// cases is the suite: each runs on a service of its own.
var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"missing key", func(t *testing.T, e *env) {
		if r := e.post("/items/g1", map[string]string{"Authorization": "Bearer acct1"}, `{"name":"a"}`); !r.problem(idemtype.KindMissingKey) {
			t.Fatalf("%+v; want the missing-key problem", r)
		}
		if n := e.runs.Load(); n != 0 {
			t.Fatalf("a phase ran %d times", n)
		}
	}},
	{"invalid key", func(t *testing.T, e *env) {
		if r := e.post("/items/g1", keyed(strings.Repeat("k", 300)), `{"name":"a"}`); !r.problem(idemtype.KindInvalidKey) {
			t.Fatalf("%+v; want the invalid-key problem", r)
		}
	}},
	{"replay byte for byte", func(t *testing.T, e *env) {
		first := e.post("/items/g1", keyed("k1"), `{"name":"a","client_ts":"1"}`)
		if first.status != 201 || first.header.Get(idemtype.ReplayedHeader) != "" {
			t.Fatalf("first: %+v", first)
		}
		// The excluded field may differ; the answer is the stored one.
		again := e.post("/items/g1", keyed("k1"), `{"client_ts":"2", "name":"a"}`)
		if again.status != 201 || again.body != first.body || again.header.Get(idemtype.ReplayedHeader) != "true" ||
			again.header.Get("Content-Type") != first.header.Get("Content-Type") {
			t.Fatalf("replay: %+v; want %+v with Idempotent-Replayed", again, first)
		}
		if n := e.count(`SELECT count(*) FROM items`); n != 1 {
			t.Fatalf("%d items", n)
		}
	}},
	{"a rendered replay keeps the id and status, and shows the resource as it is", func(t *testing.T, e *env) {
		first := e.post("/rendered", keyed("r1"), `{"name":"a"}`)
		if first.status != 201 || first.header.Get("Location") == "" || !strings.Contains(first.body, `"name":"a"`) {
			t.Fatalf("first: %+v", first)
		}
		e.exec(`UPDATE items SET name = 'renamed'`)
		for range 2 {
			again := e.post("/rendered", keyed("r1"), `{"name":"a"}`)
			var a, b struct{ ID int64 }
			json.Unmarshal([]byte(first.body), &a)
			json.Unmarshal([]byte(again.body), &b)
			if again.status != 201 || b.ID != a.ID || again.header.Get("Location") != first.header.Get("Location") ||
				again.header.Get(idemtype.ReplayedHeader) != "true" || again.header.Get(idem.RenderedHeader) != "true" || !strings.Contains(again.body, `"name":"renamed"`) {
				t.Fatalf("replay: %+v; want 201, the first answer's id and Location, the current name, rendered", again)
			}
		}
		if n := e.count(`SELECT count(*) FROM items`); n != 1 {
			t.Fatalf("%d items", n)
		}
	}},
	{"a render runs no write", func(t *testing.T, e *env) {
		if first := e.post("/rendered", keyed("w1"), `{"name":"write"}`); first.status != 201 {
			t.Fatalf("first: %+v", first)
		}
		if again := e.post("/rendered", keyed("w1"), `{"name":"write"}`); again.status != 500 {
			t.Fatalf("a render that writes: %+v; want 500", again)
		}
		if n := e.count(`SELECT count(*) FROM items WHERE name = 'written'`); n != 0 {
			t.Fatalf("the render's write committed")
		}
	}},
	{"reused key", func(t *testing.T, e *env) {
		e.post("/items/g1", keyed("k1"), `{"name":"a"}`)
		if r := e.post("/items/g1", keyed("k1"), `{"name":"b"}`); !r.problem(idemtype.KindMismatch) {
			t.Fatalf("%+v; want key-reused", r)
		}
		// The path is part of the request.
		if r := e.post("/items/g2", keyed("k1"), `{"name":"a"}`); !r.problem(idemtype.KindMismatch) {
			t.Fatalf("another path: %+v; want key-reused", r)
		}
	}},
	{"in flight, a duplicate waits for the answer", func(t *testing.T, e *env) {
		first := make(chan reply, 1)
		go func() { first <- e.post("/items/g1", keyed("wait"), `{"name":"a","hold":true}`) }()
		<-e.inHold // the first holds its claim
		second := make(chan reply, 1)
		go func() { second <- e.post("/items/g1", keyed("wait"), `{"name":"a","hold":true}`) }()
		// Were the duplicate not waiting, it would be answered 409 while
		// the first still holds.
		select {
		case r := <-second:
			t.Fatalf("the duplicate was answered while its key executed: %+v", r)
		case <-time.After(300 * time.Millisecond):
		}
		close(e.hold)
		a, b := <-first, <-second
		if a.status != 201 || b.status != 201 || b.body != a.body || b.header.Get(idemtype.ReplayedHeader) != "true" {
			t.Fatalf("first %+v, duplicate %+v; want the first's 201 replayed to the duplicate", a, b)
		}
		if n := e.runs.Load(); n != 1 {
			t.Fatalf("%d runs; want 1", n)
		}
	}},
	{"in flight, with Retry-After", func(t *testing.T, e *env) {
		first := make(chan reply, 1)
		go func() { first <- e.post("/items/g1", keyed("dup"), `{"name":"a","hold":true}`) }()
		<-e.inHold // the first holds its claim
		// A client that will not wait says so, and is answered at once.
		h := keyed("dup")
		h["Prefer"] = "wait=0"
		second := e.post("/items/g1", h, `{"name":"a","hold":true}`)
		close(e.hold)
		if r := <-first; r.status != 201 {
			t.Fatalf("first: %+v", r)
		}
		if !second.problem(idemtype.KindInFlight) || second.header.Get("Retry-After") == "" {
			t.Fatalf("second: %+v; want 409 in-flight with Retry-After", second)
		}
		if r := e.post("/items/g1", keyed("dup"), `{"name":"a","hold":true}`); r.status != 201 || r.header.Get(idemtype.ReplayedHeader) != "true" {
			t.Fatalf("after the first completed: %+v; want its replay", r)
		}
	}},
	{"release on validation failure", func(t *testing.T, e *env) {
		if r := e.post("/items/g1", keyed("k1"), `{"name":""}`); r.status != 400 {
			t.Fatalf("%+v; want the phase's 400", r)
		}
		if n := e.count(`SELECT count(*) FROM records`); n != 0 {
			t.Fatalf("%d records remain", n)
		}
		if r := e.post("/items/g1", keyed("k1"), `{"name":"fixed"}`); r.status != 201 || r.header.Get(idemtype.ReplayedHeader) != "" {
			t.Fatalf("the corrected retry: %+v; want a fresh 201", r)
		}
	}},
	{"a panic releases the key", func(t *testing.T, e *env) {
		if r := e.post("/items/g1", keyed("k1"), `{"name":"a","panic":true}`); r.status != 500 {
			t.Fatalf("%+v; want 500", r)
		}
		if r := e.post("/items/g1", keyed("k1"), `{"name":"a","panic":true}`); r.status != 500 || e.runs.Load() != 2 {
			t.Fatalf("retry: %+v, %d runs; want the key released and the phase run again", r, e.runs.Load())
		}
	}},
	{"scope isolation", func(t *testing.T, e *env) {
		a := e.post("/items/g1", keyed("shared"), `{"name":"a"}`)
		b := e.post("/items/g1", map[string]string{"Idempotency-Key": "shared", "Authorization": "Bearer acct2"}, `{"name":"a"}`)
		if a.status != 201 || b.status != 201 || a.body == b.body || b.header.Get(idemtype.ReplayedHeader) != "" {
			t.Fatalf("a %+v, b %+v; want an execution each", a, b)
		}
		if r := e.post("/items/g1", map[string]string{"Idempotency-Key": "k"}, `{"name":"a"}`); !r.problem(idemtype.KindMissingScope) {
			t.Fatalf("no principal: %+v; want missing-scope", r)
		}
		t1 := e.post("/tenant-items", map[string]string{"Idempotency-Key": "k", "X-Tenant": "t1"}, `{"name":"a"}`)
		t2 := e.post("/tenant-items", map[string]string{"Idempotency-Key": "k", "X-Tenant": "t2"}, `{"name":"a"}`)
		if t1.status != 201 || t2.status != 201 || t1.body == t2.body {
			t.Fatalf("header scopes: %+v, %+v; want an execution each", t1, t2)
		}
		if r := e.post("/tenant-items", map[string]string{"Idempotency-Key": "k"}, `{"name":"a"}`); !r.problem(idemtype.KindMissingScope) {
			t.Fatalf("no X-Tenant: %+v; want missing-scope", r)
		}
	}},
	{"a replay does not depend on the binder", func(t *testing.T, e *env) {
		first := e.post("/items/g1", keyed("bind"), `{"name":"a","count":9}`)
		if first.status != 201 {
			t.Fatalf("%+v; want 201", first)
		}
		// 9.0 does not bind to an integer, but it is the same number: the
		// same request, whose stored answer is replayed.
		again := e.post("/items/g1", keyed("bind"), `{"name":"a","count":9.0}`)
		if again.status != 201 || again.body != first.body || again.header.Get(idemtype.ReplayedHeader) != "true" {
			t.Fatalf("the retry the binder refuses: %+v; want the replay of %+v", again, first)
		}
		// Under a new key it is the binder's 400, and nothing is recorded.
		if r := e.post("/items/g1", keyed("bind-new"), `{"name":"a","count":9.0}`); r.status != 400 {
			t.Fatalf("a new key the binder refuses: %+v; want 400", r)
		}
		if r := e.post("/items/g1", keyed("bind-new"), `{"name":"a","count":9}`); r.status != 201 || r.header.Get(idemtype.ReplayedHeader) != "" {
			t.Fatalf("the same key, bound: %+v; want a first execution", r)
		}
		if n := e.runs.Load(); n != 2 {
			t.Fatalf("%d executions; want 2", n)
		}
	}},
	{"path scopes", func(t *testing.T, e *env) {
		// path:group: one key space per value of the path parameter.
		t1 := e.post("/tenant-paths/t1", map[string]string{"Idempotency-Key": "k"}, `{"name":"a"}`)
		t2 := e.post("/tenant-paths/t2", map[string]string{"Idempotency-Key": "k"}, `{"name":"a"}`)
		again := e.post("/tenant-paths/t1", map[string]string{"Idempotency-Key": "k"}, `{"name":"a"}`)
		if t1.status != 201 || t2.status != 201 || t1.body == t2.body || again.body != t1.body || again.header.Get(idemtype.ReplayedHeader) != "true" {
			t.Fatalf("path scopes: %+v, %+v, %+v; want an execution per tenant and the replay", t1, t2, again)
		}
		// principal+path:group: per caller and tenant.
		a1 := e.post("/own-paths/t1", keyed("k"), `{"name":"a"}`)
		b1 := e.post("/own-paths/t1", map[string]string{"Idempotency-Key": "k", "Authorization": "Bearer acct2"}, `{"name":"a"}`)
		a2 := e.post("/own-paths/t2", keyed("k"), `{"name":"a"}`)
		a1again := e.post("/own-paths/t1", keyed("k"), `{"name":"a"}`)
		if a1.status != 201 || b1.status != 201 || a2.status != 201 || a1.body == b1.body || a1.body == a2.body || a1again.body != a1.body {
			t.Fatalf("principal and path: %+v, %+v, %+v, %+v; want an execution per caller and tenant", a1, b1, a2, a1again)
		}
		if r := e.post("/own-paths/t1", map[string]string{"Idempotency-Key": "k"}, `{"name":"a"}`); !r.problem(idemtype.KindMissingScope) {
			t.Fatalf("no principal: %+v; want missing-scope", r)
		}
		if n := e.runs.Load(); n != 5 {
			t.Fatalf("%d executions; want 5", n)
		}
	}},
	{"optional key", func(t *testing.T, e *env) {
		a, b := e.post("/optional", nil, `{"name":"a"}`), e.post("/optional", nil, `{"name":"a"}`)
		if a.status != 201 || b.status != 201 || a.body == b.body {
			t.Fatalf("without a key: %+v, %+v; want two executions", a, b)
		}
		c, d := e.post("/optional", map[string]string{"Idempotency-Key": "o"}, `{"name":"a"}`), e.post("/optional", map[string]string{"Idempotency-Key": "o"}, `{"name":"a"}`)
		if c.status != 201 || d.body != c.body || d.header.Get(idemtype.ReplayedHeader) != "true" {
			t.Fatalf("with a key: %+v, %+v; want the replay", c, d)
		}
	}},
	{"signed sender and body key", func(t *testing.T, e *env) {
		signed := func(body string, secret []byte) map[string]string {
			return map[string]string{"Acme-Signature": idemsig.Sign(time.Now(), []byte(body), secret)}
		}
		body := `{"name":"evt_1"}`
		first := e.post("/webhooks", signed(body, acmeSecret), body)
		again := e.post("/webhooks", signed(body, acmeSecret), body)
		if first.status != 201 || again.body != first.body || again.header.Get(idemtype.ReplayedHeader) != "true" {
			t.Fatalf("delivery %+v, redelivery %+v; want the replay", first, again)
		}
		if r := e.post("/webhooks", signed(body, []byte("whsec_wrong")), body); !r.problem(idemtype.KindInvalidSignature) {
			t.Fatalf("a bad signature: %+v; want invalid-signature", r)
		}
		if r := e.post("/webhooks", signed(`{}`, acmeSecret), `{}`); !r.problem(idemtype.KindMissingKey) {
			t.Fatalf("no key in the body: %+v; want missing-key", r)
		}
	}},
	{"large body", func(t *testing.T, e *env) {
		big := `{"name":"` + strings.Repeat("x", 2000) + `"}`
		if r := e.post("/items/g1", keyed("big"), big); r.status != http.StatusRequestEntityTooLarge || !r.problem(idemtype.KindTooLarge) {
			t.Fatalf("%+v; want the 413 request-too-large problem", r)
		}
		if n := e.runs.Load(); n != 0 {
			t.Fatal("the phase ran for an oversized body")
		}
		// An operation's own limit (request.maxBodyBytes) overrides the
		// service's, up or down.
		if r := e.post("/tenant-items", map[string]string{"Idempotency-Key": "big", "X-Tenant": "t1"}, big); r.status != http.StatusCreated {
			t.Fatalf("%+v; want 201 under the operation's larger limit", r)
		}
	}},
	{"concurrent duplicates", func(t *testing.T, e *env) {
		var wg sync.WaitGroup
		replies := make([]reply, 16)
		for i := range replies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies[i] = e.post("/items/g1", keyed("many"), `{"name":"a"}`)
			}()
		}
		wg.Wait()
		var body string
		for _, r := range replies {
			switch {
			case r.status == 201 && body == "":
				body = r.body
			case r.status == 201 && r.body != body:
				t.Fatalf("two answers: %s and %s", body, r.body)
			case r.status != 201:
				t.Fatalf("%+v; want every duplicate to wait for the one answer", r)
			}
		}
		if n := e.count(`SELECT count(*) FROM items`); n != 1 {
			t.Fatalf("%d items from 16 duplicates; want 1", n)
		}
	}},
}

// Run runs the suite against a, each case in parallel on a service of its
// own.
func Run(t *testing.T, a Adapter) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newEnv(t, a))
		})
	}
}
