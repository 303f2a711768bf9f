// Package routers runs the generated glue of each router idemgen serves
// (the golden cases std_http_server, chi_server, gorilla_server and
// gin_server: one spec, four servers) as a service on the test database:
// the same requests get the same answers from each.
package routers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	chiapi "github.com/idemgen/idemgen/golden/chi_server/out"
	ginapi "github.com/idemgen/idemgen/golden/gin_server/out"
	gorillaapi "github.com/idemgen/idemgen/golden/gorilla_server/out"
	stdapi "github.com/idemgen/idemgen/golden/std_http_server/out"
	"github.com/idemgen/idemgen/golden/std_http_server/out/depositclient"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// deposit implements the phases of createDeposit for any of the four
// generated packages: record inserts a row, notify calls nobody, finish
// answers with the row's id.
type deposit[Req, State any, Resp any] struct {
	account  func(Req) string
	created  func(id string) Resp
	notified *int
}

func (d *deposit[Req, State, Resp]) Record(ctx context.Context, tx pgx.Tx, request Req, _ *State) error {
	_, err := tx.Exec(ctx, `INSERT INTO deposits (account) VALUES ($1)`, d.account(request))
	return err
}

func (d *deposit[Req, State, Resp]) Notify(context.Context, string, Req, *State) error {
	*d.notified++
	return nil
}

func (d *deposit[Req, State, Resp]) Finish(ctx context.Context, tx pgx.Tx, request Req, _ *State) (Resp, error) {
	var id int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM deposits`).Scan(&id)
	return d.created(fmt.Sprintf("%s-%d", d.account(request), id)), err
}

// account implements the plain getAccount.
type account[Req, Resp any] struct {
	id      func(Req) string
	respond func(id string) Resp
}

func (a *account[Req, Resp]) GetAccount(_ context.Context, request Req) (Resp, error) {
	return a.respond(a.id(request)), nil
}

func ptr(s string) *string { return &s }

var stdPlain = &account[stdapi.GetAccountRequestObject, stdapi.GetAccountResponseObject]{
	id:      func(r stdapi.GetAccountRequestObject) string { return r.AccountId },
	respond: func(id string) stdapi.GetAccountResponseObject { return stdapi.GetAccount200JSONResponse{Id: ptr(id)} }}

func stdDeposit(notified *int) *deposit[stdapi.CreateDepositRequestObject, stdapi.CreateDepositState, stdapi.CreateDepositResponseObject] {
	return &deposit[stdapi.CreateDepositRequestObject, stdapi.CreateDepositState, stdapi.CreateDepositResponseObject]{
		account: func(r stdapi.CreateDepositRequestObject) string { return r.AccountId },
		created: func(id string) stdapi.CreateDepositResponseObject {
			return stdapi.CreateDeposit201JSONResponse{Id: ptr(id)}
		},
		notified: notified}
}

var gorillaPlain = &account[gorillaapi.GetAccountRequestObject, gorillaapi.GetAccountResponseObject]{
	id: func(r gorillaapi.GetAccountRequestObject) string { return r.AccountId },
	respond: func(id string) gorillaapi.GetAccountResponseObject {
		return gorillaapi.GetAccount200JSONResponse{Id: ptr(id)}
	}}

func gorillaDeposit(notified *int) *deposit[gorillaapi.CreateDepositRequestObject, gorillaapi.CreateDepositState, gorillaapi.CreateDepositResponseObject] {
	return &deposit[gorillaapi.CreateDepositRequestObject, gorillaapi.CreateDepositState, gorillaapi.CreateDepositResponseObject]{
		account: func(r gorillaapi.CreateDepositRequestObject) string { return r.AccountId },
		created: func(id string) gorillaapi.CreateDepositResponseObject {
			return gorillaapi.CreateDeposit201JSONResponse{Id: ptr(id)}
		},
		notified: notified}
}

// dropFirst loses the first answer after the server sent it, as a broken
// connection does.
type dropFirst struct {
	next    http.RoundTripper
	dropped bool
}

func (d *dropFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := d.next.RoundTrip(req)
	if err == nil && !d.dropped {
		d.dropped = true
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return res, err
}

func TestGeneratedRouters(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	servers := map[string]func(eng *idem.Engine, notified *int) (http.Handler, error){
		"net/http": func(eng *idem.Engine, notified *int) (http.Handler, error) {
			return stdapi.Register(http.NewServeMux(),
				&account[stdapi.GetAccountRequestObject, stdapi.GetAccountResponseObject]{
					id:      func(r stdapi.GetAccountRequestObject) string { return r.AccountId },
					respond: func(id string) stdapi.GetAccountResponseObject { return stdapi.GetAccount200JSONResponse{Id: ptr(id)} }},
				stdapi.Phases{CreateDeposit: &deposit[stdapi.CreateDepositRequestObject, stdapi.CreateDepositState, stdapi.CreateDepositResponseObject]{
					account: func(r stdapi.CreateDepositRequestObject) string { return r.AccountId },
					created: func(id string) stdapi.CreateDepositResponseObject {
						return stdapi.CreateDeposit201JSONResponse{Id: ptr(id)}
					},
					notified: notified}},
				&idemstd.Runtime{Engine: eng})
		},
		"chi": func(eng *idem.Engine, notified *int) (http.Handler, error) {
			return chiapi.Register(chi.NewRouter(),
				&account[chiapi.GetAccountRequestObject, chiapi.GetAccountResponseObject]{
					id:      func(r chiapi.GetAccountRequestObject) string { return r.AccountId },
					respond: func(id string) chiapi.GetAccountResponseObject { return chiapi.GetAccount200JSONResponse{Id: ptr(id)} }},
				chiapi.Phases{CreateDeposit: &deposit[chiapi.CreateDepositRequestObject, chiapi.CreateDepositState, chiapi.CreateDepositResponseObject]{
					account: func(r chiapi.CreateDepositRequestObject) string { return r.AccountId },
					created: func(id string) chiapi.CreateDepositResponseObject {
						return chiapi.CreateDeposit201JSONResponse{Id: ptr(id)}
					},
					notified: notified}},
				&idemstd.Runtime{Engine: eng})
		},
		"gorilla": func(eng *idem.Engine, notified *int) (http.Handler, error) {
			return gorillaapi.Register(mux.NewRouter(),
				&account[gorillaapi.GetAccountRequestObject, gorillaapi.GetAccountResponseObject]{
					id: func(r gorillaapi.GetAccountRequestObject) string { return r.AccountId },
					respond: func(id string) gorillaapi.GetAccountResponseObject {
						return gorillaapi.GetAccount200JSONResponse{Id: ptr(id)}
					}},
				gorillaapi.Phases{CreateDeposit: &deposit[gorillaapi.CreateDepositRequestObject, gorillaapi.CreateDepositState, gorillaapi.CreateDepositResponseObject]{
					account: func(r gorillaapi.CreateDepositRequestObject) string { return r.AccountId },
					created: func(id string) gorillaapi.CreateDepositResponseObject {
						return gorillaapi.CreateDeposit201JSONResponse{Id: ptr(id)}
					},
					notified: notified}},
				&idemstd.Runtime{Engine: eng})
		},
		"gin": func(eng *idem.Engine, notified *int) (http.Handler, error) {
			e := gin.New()
			err := ginapi.Register(e,
				&account[ginapi.GetAccountRequestObject, ginapi.GetAccountResponseObject]{
					id:      func(r ginapi.GetAccountRequestObject) string { return r.AccountId },
					respond: func(id string) ginapi.GetAccountResponseObject { return ginapi.GetAccount200JSONResponse{Id: ptr(id)} }},
				ginapi.Phases{CreateDeposit: &deposit[ginapi.CreateDepositRequestObject, ginapi.CreateDepositState, ginapi.CreateDepositResponseObject]{
					account: func(r ginapi.CreateDepositRequestObject) string { return r.AccountId },
					created: func(id string) ginapi.CreateDepositResponseObject {
						return ginapi.CreateDeposit201JSONResponse{Id: ptr(id)}
					},
					notified: notified}},
				&idemgin.Runtime{Engine: eng})
			return e, err
		},
	}
	// Mounted under /v1 the router's way: a chi sub-router, and, as
	// oapi-codegen has it, a BaseURL for net/http, gorilla and gin.
	servers["chi mounted"] = func(eng *idem.Engine, notified *int) (http.Handler, error) {
		sub, err := servers["chi"](eng, notified)
		root := chi.NewRouter()
		root.Mount("/v1", sub)
		return root, err
	}
	prefixes := map[string]string{"chi mounted": "/v1"}
	for name, base := range map[string]func(eng *idem.Engine, notified *int) (http.Handler, error){
		"net/http base URL": func(eng *idem.Engine, notified *int) (http.Handler, error) {
			return stdapi.RegisterWithOptions(nil, stdPlain, stdapi.Phases{CreateDeposit: stdDeposit(notified)}, &idemstd.Runtime{Engine: eng}, stdapi.RegisterOptions{BaseURL: "/v1"})
		},
		"gorilla base URL": func(eng *idem.Engine, notified *int) (http.Handler, error) {
			return gorillaapi.RegisterWithOptions(nil, gorillaPlain, gorillaapi.Phases{CreateDeposit: gorillaDeposit(notified)}, &idemstd.Runtime{Engine: eng}, gorillaapi.RegisterOptions{BaseURL: "/v1"})
		},
	} {
		servers[name], prefixes[name] = base, "/v1"
	}
	for name, serve := range servers {
		prefix := prefixes[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := idemtest.New(t, idem.Options{})
			if _, err := env.Pool.Exec(context.Background(), `CREATE TABLE deposits (account text)`); err != nil {
				t.Fatal(err)
			}
			notified := 0
			h, err := serve(env.Engine, &notified)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			post := func(account, key, body string) (int, string, http.Header) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+prefix+"/accounts/"+account+"/deposits", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Tenant", "t1")
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b), res.Header
			}
			status, first, _ := post("acc-1", "k1", `{"amount":5}`)
			if status != 201 || !strings.Contains(first, `"acc-1-1"`) {
				t.Fatalf("first: %d %s", status, first)
			}
			status, again, h2 := post("acc-1", "k1", `{"amount":5}`)
			if status != 201 || again != first || h2.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry: %d %s %v; want the replay of %s", status, again, h2, first)
			}
			if status, body, _ := post("acc-1", "k1", `{"amount":6}`); status != 422 {
				t.Fatalf("another body: %d %s; want 422", status, body)
			}
			// The path parameter is part of the request: the router's own
			// parameters reach the fingerprint.
			if status, body, _ := post("acc-2", "k1", `{"amount":5}`); status != 422 {
				t.Fatalf("another account: %d %s; want 422", status, body)
			}
			if status, body, _ := post("acc-1", "", `{"amount":5}`); status != 400 || !strings.Contains(body, "missing-key") {
				t.Fatalf("no key: %d %s; want missing-key", status, body)
			}
			if notified != 1 {
				t.Fatalf("the foreign phase ran %d times; want once", notified)
			}
			// The generated client, whose first answer is lost after the
			// server committed it: its retry, under the same key, gets the
			// stored answer.
			drop := &dropFirst{next: http.DefaultTransport}
			client, err := depositclient.NewIdempotentClient(srv.URL+prefix, idemclient.Policy{MinWait: time.Millisecond},
				depositclient.WithHTTPClient(&http.Client{Transport: drop}))
			if err != nil {
				t.Fatal(err)
			}
			tenant := func(_ context.Context, req *http.Request) error { req.Header.Set("X-Tenant", "t1"); return nil }
			resp, result, err := client.CreateDeposit(context.Background(), "", "acc-3", depositclient.CreateDepositJSONRequestBody{Amount: 7}, tenant)
			if err != nil || resp.StatusCode() != 201 || result.Attempts != 2 || !result.Replayed || resp.JSON201 == nil || *resp.JSON201.Id != "acc-3-2" {
				t.Fatalf("the client's call: %v, %+v, %v; want the stored 201 on its second attempt", err, result, resp)
			}
			// The same key with another body: the client's response type
			// has the refusal as a typed field, as it has every status the
			// middleware answers.
			resp, _, err = client.CreateDeposit(context.Background(), result.Key, "acc-3", depositclient.CreateDepositJSONRequestBody{Amount: 8}, tenant)
			if err != nil || resp.StatusCode() != 422 || resp.ApplicationproblemJSON422 == nil || resp.ApplicationproblemJSON422.Type != "urn:idemgen:problem:key-reused" {
				t.Fatalf("a reused key through the client: %v, %+v; want the typed 422 key-reused problem", err, resp)
			}
			resp, _, err = client.CreateDeposit(context.Background(), "k-new", "acc-3", depositclient.CreateDepositJSONRequestBody{Amount: 8})
			if err != nil || resp.StatusCode() != 401 || resp.ApplicationproblemJSON401 == nil || resp.ApplicationproblemJSON401.Type != "urn:idemgen:problem:missing-scope" {
				t.Fatalf("no scope through the client: %v, %+v; want the typed 401 missing-scope problem", err, resp)
			}
			res, err := http.Get(srv.URL + prefix + "/accounts/acc-9")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || !strings.Contains(string(b), `"acc-9"`) {
				t.Fatalf("plain operation: %d %s", res.StatusCode, b)
			}
		})
	}
}
