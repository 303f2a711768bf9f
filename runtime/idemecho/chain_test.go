package idemecho_test

import (
	"context"
	"errors"
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
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// chain serves POST /items behind an outer middleware that records what
// the rest of the chain returned, as echo's request logger or a tracer
// does, and returns the echo instance and what the outer middleware saw.
func chain(t *testing.T, handler func(rt *idemecho.Runtime) echo.HandlerFunc) (*echo.Echo, *[]error) {
	t.Helper()
	eng := idemtest.New(t, idem.Options{}).Engine
	rt := &idemecho.Runtime{Engine: eng, Principal: func(echo.Context) (string, error) { return "acct", nil }}
	spec := &idemecho.Spec{
		Operation: &idem.Operation{ID: "createItem", Policy: idem.Policy{Lease: 10 * time.Second}},
		Key:       idemhttp.KeyRule{Required: true, MaxLength: 255, Header: "Idempotency-Key"}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/items",
	}
	if err := eng.Register(spec.Operation); err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = idemecho.HTTPErrorHandler
	var seen []error
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			seen = append(seen, err)
			return err
		}
	})
	e.POST("/items", handler(rt), idemecho.Middleware(rt, spec))
	return e, &seen
}

func serve(e *echo.Echo, key string) *httptest.ResponseRecorder {
	return serveBody(e, key, `{"name":"pen"}`)
}

func serveBody(e *echo.Echo, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/items", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// TestMiddlewareReturnsErrors: the idempotency middleware hands errors up
// echo's chain as echo's own middlewares do (rendered once, then returned),
// so that an outer logger or tracer sees them; the response is written once.
func TestMiddlewareReturnsErrors(t *testing.T) {
	boom := errors.New("boom")
	e, seen := chain(t, func(*idemecho.Runtime) echo.HandlerFunc {
		return func(c echo.Context) error { return boom }
	})

	rec := serve(e, "k1")
	if rec.Code != http.StatusInternalServerError || strings.Count(rec.Body.String(), `"status":500`) != 1 {
		t.Errorf("handler error: %d %q; want one 500 problem", rec.Code, rec.Body)
	}
	if len(*seen) != 1 || !errors.Is((*seen)[0], boom) {
		t.Errorf("the outer middleware saw %v; want the handler's error", *seen)
	}

	// A protocol refusal is written as problem+json and returned as an
	// *echo.HTTPError carrying the status and the runtime's error.
	*seen = nil
	rec = serve(e, "")
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "missing-key") || strings.Count(rec.Body.String(), `"status"`) != 1 {
		t.Errorf("missing key: %d %q; want one 400 missing-key problem", rec.Code, rec.Body)
	}
	var he *echo.HTTPError
	var ie *idem.Error
	if len(*seen) != 1 || !errors.As((*seen)[0], &he) || he.Code != http.StatusBadRequest || !errors.As((*seen)[0], &ie) || ie.Kind != idemtype.KindMissingKey {
		t.Errorf("missing key: the outer middleware saw %#v; want an *echo.HTTPError 400 wrapping the missing-key error", *seen)
	}
}

// TestEngineRefusalReturned: a refusal the engine decides (the key reused
// with another body) is answered by the handler's response object, and
// reaches the outer middleware as an *echo.HTTPError all the same.
func TestEngineRefusalReturned(t *testing.T) {
	e, seen := chain(t, func(rt *idemecho.Runtime) echo.HandlerFunc {
		return func(c echo.Context) error {
			resp, err := idemecho.Execute(c.Request().Context(), rt, nil, []idem.Phase[state]{
				{Name: "respond", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
					return &idem.Response{Status: http.StatusCreated, Body: []byte("{}")}, nil
				}},
			})
			if err != nil {
				return err
			}
			return idemecho.Writer(c.Request().Context(), resp)(c.Response())
		}
	})
	if rec := serveBody(e, "k2", `{"name":"a"}`); rec.Code != http.StatusCreated {
		t.Fatalf("first call: %d %q", rec.Code, rec.Body)
	}
	rec := serveBody(e, "k2", `{"name":"b"}`)
	var he *echo.HTTPError
	var ie *idem.Error
	if rec.Code != http.StatusUnprocessableEntity || len(*seen) != 2 || (*seen)[0] != nil ||
		!errors.As((*seen)[1], &he) || he.Code != http.StatusUnprocessableEntity || !errors.As((*seen)[1], &ie) || ie.Kind != idemtype.KindMismatch {
		t.Errorf("reused key: %d, the outer middleware saw %#v; want 422 and an *echo.HTTPError wrapping the mismatch", rec.Code, *seen)
	}
}

// TestOperationMiddlewares: the user's middlewares of an operation run
// outside idemgen's, and the error handler innermost, next to the handler;
// operations without middlewares of idemgen's get the error handler too.
func TestOperationMiddlewares(t *testing.T) {
	var order []string
	mw := func(name string) echo.MiddlewareFunc {
		return func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error { order = append(order, name); return next(c) }
		}
	}
	handled := errors.New("handled")
	onError := func(c echo.Context, err error) error {
		order = append(order, "onError:"+err.Error())
		return handled
	}
	got := idemecho.OperationMiddlewares(
		map[string][]echo.MiddlewareFunc{"createItem": {mw("user1"), mw("user2")}, "listItems": {mw("userList")}},
		map[string]echo.MiddlewareFunc{"createItem": mw("idempotency")},
		onError, []string{"createItem", "listItems", "getItem"})
	fail := func(echo.Context) error { order = append(order, "handler"); return errors.New("bad body") }
	for _, tc := range []struct {
		op   string
		want string
	}{
		{"createItem", "user1 user2 idempotency handler onError:bad body"},
		{"listItems", "userList handler onError:bad body"},
		{"getItem", "handler onError:bad body"},
	} {
		order = nil
		h := fail
		mws := got[tc.op]
		for i := len(mws) - 1; i >= 0; i-- {
			h = mws[i](h)
		}
		if err := h(echo.New().NewContext(httptest.NewRequest("GET", "/", nil), httptest.NewRecorder())); !errors.Is(err, handled) {
			t.Errorf("%s: returned %v; want the error handler's", tc.op, err)
		}
		if s := strings.Join(order, " "); s != tc.want {
			t.Errorf("%s: ran %q; want %q", tc.op, s, tc.want)
		}
	}
	if _, ok := idemecho.OperationMiddlewares(nil, nil, nil, []string{"getItem"})["getItem"]; ok {
		t.Error("an operation with no middleware at all got an entry")
	}
}

// TestReplayInPlaceOfABinderError: when a binder's 400 is replaced by the
// key's stored answer, the chain sees the replay: no error returned, and
// the response's status is the replay's.
func TestReplayInPlaceOfABinderError(t *testing.T) {
	var status int
	e, seen := chain(t, func(rt *idemecho.Runtime) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Header.Get("X-Bind") == "fail" {
				return echo.NewHTTPError(http.StatusBadRequest, "does not bind")
			}
			resp, err := idemecho.Execute(c.Request().Context(), rt, nil, []idem.Phase[state]{
				{Name: "respond", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
					return &idem.Response{Status: http.StatusCreated, Body: []byte(`{"id":1}`)}, nil
				}},
			})
			if err != nil {
				return err
			}
			return idemecho.WriteResponse(c.Response(), resp, idemecho.CallFrom(c.Request().Context()).Replayed)
		}
	})
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { err := next(c); status = c.Response().Status; return err }
	})
	if rec := serve(e, "k1"); rec.Code != http.StatusCreated {
		t.Fatalf("the first request: %d %s", rec.Code, rec.Body)
	}
	*seen = nil
	req := httptest.NewRequest(http.MethodPost, "/items", strings.NewReader(`{"name":"pen"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k1")
	req.Header.Set("X-Bind", "fail")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || rec.Body.String() != `{"id":1}` || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry the binder refuses: %d %q", rec.Code, rec.Body)
	}
	if len(*seen) != 1 || (*seen)[0] != nil || status != http.StatusCreated {
		t.Errorf("the chain saw %v with status %d; want no error and 201", *seen, status)
	}
}
