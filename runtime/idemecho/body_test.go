package idemecho_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// trickle reads its body a byte at a time and then fails with err, if set.
type trickle struct {
	s   string
	err error
}

func (t *trickle) Read(p []byte) (int, error) {
	if t.s == "" {
		if t.err != nil {
			return 0, t.err
		}
		return 0, io.EOF
	}
	p[0], t.s = t.s[0], t.s[1:]
	return 1, nil
}

// TestBodyLimit: the middleware reads at most MaxBodyBytes, whether the
// request announces its length or not, and hands the handler the whole
// body; a read error is 400, a body over the limit the 413 problem.
func TestBodyLimit(t *testing.T) {
	rt := &idemecho.Runtime{Engine: idemtest.New(t, idem.Options{}).Engine, MaxBodyBytes: 16}
	spec := &idemecho.Spec{Operation: &idem.Operation{ID: "op"}, Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopeGlobal}, Route: "/op"}
	e := echo.New()
	e.POST("/op", func(c echo.Context) error {
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		if idemecho.CallFrom(c.Request().Context()) == nil {
			t.Error("no call in the handler's context")
		}
		return c.String(200, string(b))
	}, idemecho.Middleware(rt, spec))
	exact := strings.Repeat("x", 16)
	for _, tc := range []struct {
		name   string
		body   io.Reader
		length int64
		status int
	}{
		{"empty", strings.NewReader(""), 0, 200},
		{"at the limit", strings.NewReader(exact), 16, 200},
		{"over the limit", strings.NewReader(exact + "y"), 17, 413},
		{"at the limit, length unknown", &trickle{s: exact}, -1, 200},
		{"over the limit, length unknown", &trickle{s: exact + "y"}, -1, 413},
		{"read error", &trickle{s: "abc", err: errors.New("connection reset")}, -1, 400},
		{"length announced too long", &trickle{s: "abc"}, 10, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/op", tc.body)
			req.ContentLength = tc.length
			req.Header.Set("Idempotency-Key", "k")
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d %s; want %d", rec.Code, rec.Body, tc.status)
			}
			if tc.status == 200 {
				want := map[string]string{"empty": "", "at the limit": exact, "at the limit, length unknown": exact, "length announced too long": "abc"}[tc.name]
				if rec.Body.String() != want {
					t.Fatalf("the handler read %q; want %q", rec.Body, want)
				}
			}
			if tc.status == 400 && !strings.Contains(rec.Body.String(), "connection reset") {
				t.Fatalf("read error not reported: %s", rec.Body)
			}
			if tc.status == 413 && !strings.Contains(rec.Body.String(), `"type":"urn:idemgen:problem:request-too-large"`) {
				t.Fatalf("the 413 is not the request-too-large problem: %s", rec.Body)
			}
		})
	}
}

// TestWriteResponseCopiesHeaders: what is done to the written headers
// (an append, a value changed) reaches neither another header nor the
// stored response, which later replays write again.
func TestWriteResponseCopiesHeaders(t *testing.T) {
	stored := &idem.Response{Status: 201, Header: map[string][]string{"A": {"1"}, "B": {"2", "3"}, "Empty": {}}, Body: []byte("ok")}
	rec := httptest.NewRecorder()
	if err := idemecho.WriteResponse(rec, stored, true); err != nil {
		t.Fatal(err)
	}
	h := rec.Header()
	h.Add("A", "x")
	h["B"][0] = "changed"
	h.Add("Idempotent-Replayed", "again")
	if got := strings.Join(h["A"], ","); got != "1,x" {
		t.Errorf("A = %q", got)
	}
	if got := strings.Join(h["B"], ","); got != "changed,3" {
		t.Errorf("B = %q", got)
	}
	if got := strings.Join(h["Idempotent-Replayed"], ","); got != "true,again" {
		t.Errorf("Idempotent-Replayed = %q", got)
	}
	if v, ok := h["Empty"]; !ok || v != nil {
		t.Errorf("Empty = %#v, %v; want nil, present", v, ok)
	}
	if got := strings.Join(stored.Header["A"], ",") + ";" + strings.Join(stored.Header["B"], ","); got != "1;2,3" {
		t.Errorf("the stored headers changed: %q", got)
	}
	if rec.Code != 201 || rec.Body.String() != "ok" {
		t.Errorf("wrote %d %q", rec.Code, rec.Body)
	}
}
