package idemhttp

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

func TestCanonicalJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" {\n \"a\" : [ 1 , 2 ] } ", `{"a":[1,2]}`},
		{`{"n":[1.0, 10e-1, 0.1e1, 100, 1e2, 1.5, 15e-1, -0, 0.000, 12345678901234567890123, 1e400]}`,
			`{"n":[1,1,1,100,100,15e-1,15e-1,0,0,12345678901234567890123,1e400]}`},
		{`{"s":"<&>\u00e9\n"}`, `{"s":"<&>é\n"}`},
		{`{"nested":{"z":null,"y":true,"x":false}}`, `{"nested":{"x":false,"y":true,"z":null}}`},
		{`[]`, `[]`},
		{`"x"`, `"x"`},
	}
	for _, tc := range cases {
		got, err := CanonicalJSON([]byte(tc.in), nil)
		if err != nil || string(got) != tc.want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestCanonicalJSONExclude(t *testing.T) {
	in := `{"amount":5,"client_ts":"now","metadata":{"trace_id":"t1","k":"v"},"a/b":1,"m~n":2,"items":[{"x":1},{"x":2}]}`
	got, err := CanonicalJSON([]byte(in), []string{"/client_ts", "/metadata/trace_id", "/a~1b", "/m~0n", "/items/0", "/absent/deep"})
	want := `{"amount":5,"items":[{"x":2}],"metadata":{"k":"v"}}`
	if err != nil || string(got) != want {
		t.Fatalf("got %s, %v; want %s", got, err, want)
	}
}

func TestCanonicalJSONRejects(t *testing.T) {
	for _, in := range []string{
		`{"a":1,"a":2}`, `{"a":`, `{"a":1} {}`, `{"a":1}x`, "{\"a\":\"\xff\"}",
		strings.Repeat("[", MaxJSONDepth+2) + strings.Repeat("]", MaxJSONDepth+2),
		`{'a':1}`, `NaN`,
	} {
		_, err := CanonicalJSON([]byte(in), nil)
		var e *idemtype.Error
		if !errors.As(err, &e) || e.Kind != idemtype.KindInvalidRequest {
			t.Errorf("CanonicalJSON(%.40q) = %v; want an invalid-request error", in, err)
		}
	}
}

func fp(t *testing.T, r Request) string {
	t.Helper()
	sum, err := Fingerprint(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(sum)
}

func TestFingerprint(t *testing.T) {
	base := Request{
		Method: "POST", Route: "/accounts/{id}/payments", PathParams: map[string]string{"id": "a1"},
		Query: url.Values{"dry": {"false"}}, Header: http.Header{"X-Account": {"acc"}, "X-Other": {"1"}},
		HeaderNames: []string{"x-account"}, ContentType: "application/json; charset=utf-8",
		Body: []byte(`{"amount":100,"currency":"EUR","client_ts":"t1"}`), Exclude: []string{"/client_ts"},
	}
	want := fp(t, base)
	same := []func(r *Request){
		func(r *Request) { r.Body = []byte("{ \"currency\" : \"EUR\",\n\"amount\": 100.0 }") },
		func(r *Request) { r.Body = []byte(`{"amount":100,"currency":"EUR","client_ts":"t2"}`) },
		func(r *Request) { r.Header = http.Header{"X-Account": {"acc"}, "X-Other": {"2"}} },
		func(r *Request) { r.ContentType = "application/json" },
		func(r *Request) { r.Method = "post" },
	}
	for i, mut := range same {
		r := base
		mut(&r)
		if got := fp(t, r); got != want {
			t.Errorf("same-request variant %d changed the fingerprint", i)
		}
	}
	different := []func(r *Request){
		func(r *Request) { r.Body = []byte(`{"amount":101,"currency":"EUR"}`) },
		func(r *Request) { r.Body = []byte(`{"amount":"100","currency":"EUR"}`) },
		func(r *Request) { r.PathParams = map[string]string{"id": "a2"} },
		func(r *Request) { r.Query = url.Values{"dry": {"true"}} },
		func(r *Request) { r.Header = http.Header{"X-Account": {"other"}} },
		func(r *Request) { r.Route = "/accounts/{id}/refunds" },
		func(r *Request) { r.Method = "PUT" },
		func(r *Request) { r.ContentType = "text/plain" },
	}
	for i, mut := range different {
		r := base
		mut(&r)
		if got := fp(t, r); got == want {
			t.Errorf("different-request variant %d kept the fingerprint", i)
		}
	}
}

func TestFingerprintForm(t *testing.T) {
	r := Request{Method: "POST", Route: "/f", ContentType: "application/x-www-form-urlencoded",
		Body: []byte("b=2&a=1&a=0&ts=9"), Exclude: []string{"/ts"}}
	a := fp(t, r)
	r.Body = []byte("a=1&ts=7&a=0&b=2")
	if fp(t, r) != a {
		t.Error("field order or an excluded field changed a form fingerprint")
	}
	r.Body = []byte("a=0&a=1&b=2")
	if fp(t, r) == a {
		t.Error("the order of one field's values did not change the fingerprint")
	}
	r.Body = []byte("a=%zz")
	if _, err := Fingerprint(r); err == nil {
		t.Error("malformed form body accepted")
	}
}

// FuzzCanonicalJSON: the canonical form is what the reference
// implementation writes (or the same error), and canonical again.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,2e3,-0.5]}`, `[]`, `"x"`, `{"a":{"b":{"c":null}}}`, `1e400`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkCanonicalJSON(t, body, []string{"/a", "/b/0"}) // the same as the implementation it replaced
		c, err := CanonicalJSON(body, []string{"/a", "/b/0"})
		if err != nil {
			return
		}
		again, err := CanonicalJSON(c, nil)
		if err != nil {
			t.Fatalf("canonical form %q does not re-parse: %v", c, err)
		}
		if !bytes.Equal(again, c) {
			t.Fatalf("canonical form not stable: %q then %q", c, again)
		}
	})
}

func TestRouteParams(t *testing.T) {
	for route, want := range map[string][]string{
		"/payments":                       nil,
		"/payments/{id}":                  {"id"},
		"/accounts/{account-id}/x/{item}": {"account-id", "item"},
		"/broken/{id":                     nil,
		"/x/{.id}/{;y}/{z*}":              {"id", "y", "z"},
	} {
		if got := RouteParams(route); !slices.Equal(got, want) {
			t.Errorf("RouteParams(%q) = %q; want %q", route, got, want)
		}
	}
}
