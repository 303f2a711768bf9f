package idemstd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/testshort"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
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

// TestRequestLogAfterAFailedTakeover: the request line of a retry that took
// an abandoned execution over says resumed, and which phase failed, also
// when that phase then fails.
func TestRequestLogAfterAFailedTakeover(t *testing.T) {
	env := idemtest.New(t, idem.Options{Logger: slog.New(slog.DiscardHandler)})
	var logs bytes.Buffer
	rt := &idemstd.Runtime{Engine: env.Engine, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	type state struct{}
	attempt := 0
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempt++
		resp, err := idemstd.Execute(r.Context(), env.Engine, []byte("{}"), []idem.Phase[state]{
			{Name: "charge", Foreign: func(context.Context, string, *state) error {
				if attempt == 1 {
					runtime.Goexit() // the first owner dies mid-call
				}
				return nil
			}},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *state) (*idem.Response, error) {
				return nil, errors.New("the ledger refused")
			}},
		})
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	send := func() {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		done := make(chan struct{})
		go func() { defer close(done); h.ServeHTTP(httptest.NewRecorder(), req) }()
		<-done
	}
	send()
	if _, err := env.Pool.Exec(context.Background(), `UPDATE records SET lease_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	send()
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("%v: %q", err, logs.String())
	}
	if line["status"] != 500.0 || line["resumed"] != true || line["failed_phase"] != "finish" {
		t.Errorf("the takeover's request line: %v; want status 500, resumed, failed_phase finish", line)
	}
}

// TestDuplicateWaitsAboutTheOperation measures what a client retrying a
// duplicate waits. One that will not wait on the server (Prefer: wait=0,
// answered with Preference-Applied: wait=0) is told Retry-After from the
// operation's recent executions (3 s here), not the 30 s lease; one that
// lets the server wait (idemclient, which sends no Prefer) gets the first
// execution's answer as soon as it is stored. It logs the waits; the header
// must be below the lease.
func TestDuplicateWaitsAboutTheOperation(t *testing.T) {
	testshort.Long(t)
	env := idemtest.New(t, idem.Options{})
	rt := &idemstd.Runtime{Engine: env.Engine}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "render", Policy: idem.Policy{Lease: 30 * time.Second}}, Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/render"}
	type state struct{}
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := idemstd.Execute(r.Context(), env.Engine, nil, []idem.Phase[state]{
			{Name: "render", Foreign: func(context.Context, string, *state) error { time.Sleep(3 * time.Second); return nil }},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *state) (*idem.Response, error) {
				return &idem.Response{Status: 201, Body: []byte(`{"done":true}`)}, nil
			}},
		})
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := idemclient.NewDoer(http.DefaultClient, idemclient.Policy{})
	send := func(key string) (*http.Response, idemclient.Result) {
		call := idemclient.NewCall(context.Background(), "", key)
		req, _ := http.NewRequestWithContext(call.Context(), http.MethodPost, srv.URL+"/render", strings.NewReader("{}"))
		call.SetKey(req.Context(), req)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res, call.Result()
	}
	send("seed") // one execution, 3 s, for the engine to learn from
	first := make(chan struct{})
	go func() { defer close(first); send("k") }()
	time.Sleep(200 * time.Millisecond)
	// The duplicate's first answer, as it comes.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/render", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Prefer", "wait=0")
	raw, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw.Body.Close()
	after, _ := strconv.Atoi(raw.Header.Get("Retry-After"))
	if raw.StatusCode != 409 || after < 1 || after >= 30 {
		t.Fatalf("the duplicate: %d, Retry-After %q; want 409 with less than the 30 s lease", raw.StatusCode, raw.Header.Get("Retry-After"))
	}
	if got := raw.Header.Get("Preference-Applied"); got != "wait=0" {
		t.Fatalf("the duplicate that prefers not to wait: Preference-Applied %q; want wait=0", got)
	}
	res, result := send("k")
	<-first
	if res.StatusCode != 201 || !result.Replayed {
		t.Fatalf("the duplicate through the client: %d, %+v; want the first execution's answer", res.StatusCode, result)
	}
	t.Logf("a duplicate of a 3 s execution: Retry-After %ds with Prefer: wait=0; without it, the client waited %v over %d attempts (the lease is 30 s)",
		after, result.Waited.Round(100*time.Millisecond), result.Attempts)
}

// TestIntentAgeReachesTheEngine: the age idemclient sends with each keyed
// attempt (Idempotency-Intent-Age) reaches the engine through the adapter
// as the request's intent age; a request without it has none.
func TestIntentAgeReachesTheEngine(t *testing.T) {
	ages := make(chan time.Duration, 4)
	env := idemtest.New(t, idem.Options{Observer: idem.ObserverFunc(func(ev idem.Event) {
		if ev.Kind == idem.EventIntentAge {
			ages <- ev.Age
		}
	})})
	rt := &idemstd.Runtime{Engine: env.Engine}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true},
		Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	srv := httptest.NewServer(idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := idemstd.Execute(r.Context(), env.Engine, nil, []idem.Phase[struct{}]{{Name: "do",
			Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
				return &idem.Response{Status: 201, Body: []byte("{}")}, nil
			}}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	})))
	t.Cleanup(srv.Close)
	send := func(ctx context.Context, key string, through http.RoundTripper) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/x", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		res, err := (&http.Client{Transport: through}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	send(idemclient.WithIntentStart(context.Background(), time.Now().Add(-2*time.Hour)), "k1", &idemclient.Transport{})
	select {
	case age := <-ages:
		if age < 2*time.Hour || age > 2*time.Hour+time.Minute {
			t.Fatalf("the engine saw an intent of %v; want 2h", age)
		}
	default:
		t.Fatal("no intent age reached the engine")
	}
	send(context.Background(), "k2", http.DefaultTransport) // no header
	if len(ages) != 0 {
		t.Fatalf("a request without Idempotency-Intent-Age gave the engine an age: %v", <-ages)
	}
}

// TestRefusalLogLine: the line of a refused request says which refusal it
// was (refusal, the problem's kind), and a key the rule refused is logged
// as it was sent, escaped and cut short, never in full and never as "".
func TestRefusalLogLine(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	var logs bytes.Buffer
	rt := &idemstd.Runtime{Engine: env.Engine, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true},
		Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran")
	}))
	for _, tc := range []struct {
		name, key, refusal, logged string
	}{
		{"too long", strings.Repeat("k", 300), "invalid-key", strconv.Quote(strings.Repeat("k", 64)) + "..."},
		{"a control character", "bad\x7fkey", "invalid-key", `"bad\x7fkey"`},
		{"missing", "", "missing-key", ""},
	} {
		logs.Reset()
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		var line map[string]any
		if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v: %q", tc.name, err, logs.String())
		}
		if line["refusal"] != tc.refusal {
			t.Errorf("%s: refusal %v; want %s; line %v", tc.name, line["refusal"], tc.refusal, line)
		}
		got, _ := line["invalid_key"].(string)
		if got != tc.logged {
			t.Errorf("%s: invalid_key %q; want %q", tc.name, got, tc.logged)
		}
		if strings.Contains(logs.String(), strings.Repeat("k", 65)) {
			t.Errorf("%s: the key is logged in full: %s", tc.name, logs.String())
		}
	}
}

// TestHandlerRuleStaysInTheLog: a kept handler that breaks a rule of the
// handler mode (a step after its final transaction began) is answered as
// the API answers a failure (problem+json, 500), not with the engine's
// words, which go to the log; a Runtime without a Logger logs through
// slog.Default().
func TestHandlerRuleStaysInTheLog(t *testing.T) {
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	env := idemtest.New(t, idem.Options{})
	rt := &idemstd.Runtime{Engine: env.Engine}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "bookExam"}, Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := idemstd.ExecuteHandler(r.Context(), env.Engine, func(ctx context.Context) (*idem.Response, error) {
			if _, err := idem.DB(ctx, env.Pool).Exec(ctx, `SELECT 1`); err != nil {
				return nil, err
			}
			if _, err := idem.Foreign(ctx, "book-proctoring", func(context.Context, string) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			return &idem.Response{Status: 201}, nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // a strict server's default: the text as it is
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != 500 || strings.Contains(body, "book-proctoring") || rec.Header().Get("Content-Type") != idemtype.ProblemContentType {
		t.Errorf("%d %s %q; want the API's own 500, without the engine's words", rec.Code, rec.Header().Get("Content-Type"), body)
	}
	if !strings.Contains(logs.String(), `step \"book-proctoring\" taken after the handler began its final transaction`) || !strings.Contains(logs.String(), "operation=bookExam") {
		t.Errorf("the log through slog.Default() has not the rule's words and the request line:\n%s", logs.String())
	}
}

// keylessEvents records EventKeyless's clients.
type keylessEvents struct {
	mu      sync.Mutex
	clients []string
}

func (k *keylessEvents) Observe(ev idem.Event) {
	if ev.Kind == idem.EventKeyless {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.clients = append(k.clients, ev.Operation+" "+ev.Cause)
	}
}

// TestKeylessRequestsAreCountedByClient: while an operation's key is
// optional (clients moving to sending keys), each request without one is
// observed with its client, from its User-Agent's product, so that the
// metric says who still sends none; a keyed request is not.
func TestKeylessRequestsAreCountedByClient(t *testing.T) {
	ev := &keylessEvents{}
	env := idemtest.New(t, idem.Options{Observer: ev})
	rt := &idemstd.Runtime{Engine: env.Engine, Logger: slog.New(slog.DiscardHandler)}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "startExam"}, Key: idemhttp.KeyRule{Required: false}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/x"}
	type state struct{}
	h := idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := idemstd.Execute(r.Context(), env.Engine, []byte("{}"), []idem.Phase[state]{{Name: "start", Final: func(context.Context, pgx.Tx, *state) (*idem.Response, error) {
			return &idem.Response{Status: 201}, nil
		}}})
		if err != nil {
			http.Error(w, "failed", 500)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	}))
	for _, c := range []struct{ key, ua string }{
		{"", "exam-spa/3.4.1 (Windows NT 10.0)"}, {"", "exam-spa/3.4.2"}, {"", ""}, {"", "curl/8.5.0"}, {"k1", "exam-spa/3.5.0"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
		req.Header.Set("User-Agent", c.ua)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 201 {
			t.Fatalf("%+v: %d", c, rec.Code)
		}
	}
	want := []string{"startExam exam-spa", "startExam exam-spa", "startExam unknown", "startExam curl"}
	if strings.Join(ev.clients, ",") != strings.Join(want, ",") {
		t.Errorf("keyless events %v; want %v", ev.clients, want)
	}
}
