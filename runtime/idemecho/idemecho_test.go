package idemecho_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

type state struct{ ID int64 }

// server is what generated code does, written by hand: the middleware on
// the route, Execute in the handler, the final phase rendered. hold, if
// set, runs at the start of the first phase; claim is the operation's
// claim mode.
func server(t *testing.T, claim idem.ClaimMode, hold func()) (*httptest.Server, *idemtest.Env) {
	t.Helper()
	env := idemtest.New(t, idem.Options{Contract: idemapi.Contract{PolicyURL: "https://example.test/idempotency"}})
	if _, err := env.Pool.Exec(context.Background(), `CREATE TABLE items (id bigserial PRIMARY KEY, name text)`); err != nil {
		t.Fatal(err)
	}
	eng := env.Engine
	rt := &idemecho.Runtime{Engine: eng, MaxBodyBytes: 1024, Principal: func(c echo.Context) (string, error) {
		return strings.TrimPrefix(c.Request().Header.Get("Authorization"), "Bearer "), nil
	}}
	spec := &idemecho.Spec{
		Operation: &idem.Operation{ID: "createItem", Policy: idem.Policy{Lease: 10 * time.Second, Claim: claim}},
		Key:       idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/items/{group}",
		Exclude: []string{"/client_ts"},
	}
	e := echo.New()
	e.POST("/items/:group", func(c echo.Context) error {
		var body struct {
			Name string `json:"name"`
		}
		if err := c.Bind(&body); err != nil {
			return err
		}
		payload, _ := json.Marshal(body)
		resp, err := idemecho.Execute(c.Request().Context(), rt, payload, []idem.Phase[state]{
			{Name: "insert", Local: func(ctx context.Context, tx pgx.Tx, s *state) error {
				if hold != nil {
					hold()
				}
				return tx.QueryRow(ctx, `INSERT INTO items (name) VALUES ($1) RETURNING id`, body.Name).Scan(&s.ID)
			}},
			{Name: "respond", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
				return idemecho.Render(func(w http.ResponseWriter) error {
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Set-Cookie", "session=secret")
					w.WriteHeader(201)
					return json.NewEncoder(w).Encode(map[string]any{"id": s.ID, "name": body.Name})
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
	return srv, env
}

type reply struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url string, headers map[string][]string, body string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer acct1")
	for k, vs := range headers {
		req.Header.Del(k)
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(b)}
}

func key(k string) map[string][]string { return map[string][]string{"Idempotency-Key": {k}} }

func TestHTTPProtocol(t *testing.T) {
	srv, _ := server(t, idem.ClaimAuto, nil)
	url := srv.URL + "/items/g1"

	first := post(t, url, key(`"k1"`), `{"name":"a","client_ts":"1"}`)
	// The first answer is the stored form: a header outside replay.headers
	// (Set-Cookie) is not sent, so that the first answer and the replays are
	// the same bytes.
	if first.status != 201 || first.header.Get("Idempotent-Replayed") != "" || first.header.Get("Set-Cookie") != "" {
		t.Fatalf("first: %+v", first)
	}
	again := post(t, url, key("k1"), `{ "client_ts":"2", "name" : "a" }`)
	if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" ||
		again.header.Get("Content-Type") != first.header.Get("Content-Type") || again.header.Get("Set-Cookie") != "" {
		t.Fatalf("replay: %+v\nfirst: %+v", again, first)
	}

	problem := func(r reply, status int, kind idemtype.ErrorKind) {
		t.Helper()
		var p idemtype.Problem
		if r.status != status || r.header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal([]byte(r.body), &p) != nil || p.Type != idemtype.ProblemTypeBase+string(kind) || p.Status != status {
			t.Fatalf("got %d %s %s; want %d problem %s", r.status, r.header.Get("Content-Type"), r.body, status, kind)
		}
		if r.header.Get("Link") != `<https://example.test/idempotency>; rel="describedby"` {
			t.Fatalf("problem without policy link: %v", r.header)
		}
	}
	problem(post(t, url, key("k1"), `{"name":"b"}`), 422, idemtype.KindMismatch)
	problem(post(t, srv.URL+"/items/g2", key("k1"), `{"name":"a"}`), 422, idemtype.KindMismatch) // other path parameter
	problem(post(t, url, nil, `{"name":"a"}`), 400, idemtype.KindMissingKey)
	problem(post(t, url, key(""), `{"name":"a"}`), 400, idemtype.KindInvalidKey)
	problem(post(t, url, key(`"unterminated`), `{"name":"a"}`), 400, idemtype.KindInvalidKey)
	problem(post(t, url, key(strings.Repeat("x", 300)), `{"name":"a"}`), 400, idemtype.KindInvalidKey)
	problem(post(t, url, map[string][]string{"Idempotency-Key": {"a", "b"}}, `{"name":"a"}`), 400, idemtype.KindInvalidKey)
	problem(post(t, url, key("k2"), `{"name":"a","name":"b"}`), 400, idemtype.KindInvalidRequest)
	problem(post(t, url, map[string][]string{"Idempotency-Key": {"k3"}, "Authorization": {""}}, `{"name":"a"}`), 401, idemtype.KindMissingScope)
	if r := post(t, url, key("k4"), `{"name":"`+strings.Repeat("x", 2000)+`"}`); r.status != 413 {
		t.Fatalf("oversized body: %d", r.status)
	}
	// Another tenant with the same key gets its own execution.
	other := post(t, url, map[string][]string{"Idempotency-Key": {"k1"}, "Authorization": {"Bearer acct2"}}, `{"name":"a"}`)
	if other.status != 201 || other.body == first.body {
		t.Fatalf("other tenant: %+v", other)
	}
}

// TestHTTPConcurrentDuplicate: with the claim first, a duplicate that
// arrives while the first request is inside its phase and will not wait
// (Prefer: wait=0) gets 409 with Retry-After (after ClaimWait), and the
// replay once the first completes.
func TestHTTPConcurrentDuplicate(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv, _ := server(t, idem.ClaimFirst, func() { once.Do(func() { close(entered) }); <-release })
	url := srv.URL + "/items/g1"
	firstDone := make(chan reply)
	go func() { firstDone <- post(t, url, key("dup"), `{"name":"a"}`) }()
	<-entered // the first request holds the claim inside its phase
	// A client that will not wait (Prefer: wait=0) is answered at once.
	h := key("dup")
	h["Prefer"] = []string{"wait=0"}
	second := post(t, url, h, `{"name":"a"}`)
	close(release)
	first := <-firstDone
	if first.status != 201 || second.status != 409 || second.header.Get("Retry-After") == "" || second.header.Get("Preference-Applied") != "wait=0" {
		t.Fatalf("first %+v, second %+v; want 201 and 409 with Retry-After and Preference-Applied", first, second)
	}
	if third := post(t, url, key("dup"), `{"name":"a"}`); third.status != 201 || third.body != first.body {
		t.Fatalf("after completion: %+v", third)
	}
}

// TestHTTPConcurrentDuplicateLast: with the record written last (the
// default for all-local phases), a duplicate that arrives while the first
// request is inside its phase runs the phase too, then finds the key taken,
// rolls back and answers with the first request's response: one row.
func TestHTTPConcurrentDuplicateLast(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	srv, env := server(t, idem.ClaimAuto, func() {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
	})
	url := srv.URL + "/items/g1"
	firstDone := make(chan reply)
	go func() { firstDone <- post(t, url, key("dup"), `{"name":"a"}`) }()
	<-entered
	secondDone := make(chan reply)
	go func() { secondDone <- post(t, url, key("dup"), `{"name":"a"}`) }()
	for calls.Load() < 2 {
		time.Sleep(10 * time.Millisecond) // the duplicate is in its phase too
	}
	close(release)
	first, second := <-firstDone, <-secondDone
	if first.status != 201 || second.status != 201 || second.body != first.body {
		t.Fatalf("first %+v, second %+v; want both 201 with the same body", first, second)
	}
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d items, %v; want 1", n, err)
	}
}

// TestOptionalKey: with key.required false, a request without a key runs
// its phases unprotected (every time), and one with a key is idempotent.
func TestOptionalKey(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `CREATE TABLE hits (id bigserial PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	eng := env.Engine
	rt := &idemecho.Runtime{Engine: eng}
	spec := &idemecho.Spec{Operation: &idem.Operation{ID: "hit", Policy: idem.Policy{Lease: 10 * time.Second}},
		Key: idemhttp.KeyRule{Required: false}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/hit"}
	e := echo.New()
	e.POST("/hit", func(c echo.Context) error {
		resp, err := idemecho.Execute(c.Request().Context(), rt, nil, []idem.Phase[struct{}]{
			{Name: "a", Foreign: func(ctx context.Context, key string, _ *struct{}) error {
				if !strings.HasPrefix(key, idem.DerivedKeyPrefix) {
					t.Errorf("foreign key %q", key)
				}
				return nil
			}},
			{Name: "b", Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
				var id int
				if err := tx.QueryRow(ctx, `INSERT INTO hits DEFAULT VALUES RETURNING id`).Scan(&id); err != nil {
					return nil, err
				}
				return &idem.Response{Status: 201, Header: http.Header{}, Body: []byte(fmt.Sprint(id))}, nil
			}},
		})
		if err != nil {
			return err
		}
		return idemecho.Writer(c.Request().Context(), resp)(c.Response())
	}, idemecho.Middleware(rt, spec))
	srv := httptest.NewServer(e)
	defer srv.Close()
	for _, k := range []string{"", "", "k", "k"} {
		var h map[string][]string
		if k != "" {
			h = key(k)
		}
		if r := post(t, srv.URL+"/hit", h, `{}`); r.status != 201 {
			t.Fatalf("key %q: %+v", k, r)
		}
	}
	var hits, records int
	env.Pool.QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&hits)
	env.Pool.QueryRow(ctx, `SELECT count(*) FROM `+env.Schema+`.records`).Scan(&records)
	if hits != 3 || records != 1 {
		t.Fatalf("%d executions and %d records; want 3 (two without a key, one with) and 1", hits, records)
	}
}
